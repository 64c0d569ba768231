// CPU quantized max, average and adaptive average pooling
// (CpuQuantizedKernels), on the integers: the output keeps the input's
// scale and zero point. Max pooling picks an input value (dequantizing is
// monotonic, so the largest integer is the largest real value); average
// pooling sums q - zero_point exactly in int32 and rounds the mean onto the
// grid with quant_math::average_value.
//
// The front-ends (tensor/pool.cpp) pass contiguous per-tensor quantized
// tensors whose last two dims are (H, W) and whose leading dims are the
// planes (N*C of them), as the float kernels see them; or two 4-d
// channels-last tensors (Note [Channels-last quantized activations] in
// tensor/memory_layout.h), which are pooled a pixel at a time, every channel
// of a tap in one inner loop. Both orders sum the same integers, so they
// give the same bytes.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/quantized_pool_simd.h"
#include "tensor/memory_layout.h"
#include "tensor/quant_math.h"

namespace kiln::cpu {
namespace {

// Output rows per thread below which the loops stay serial.
constexpr int64_t kRowGrain = 64;

// The input's geometry: `count` planes of h x w, or, channels-last, `count`
// images of h x w pixels of `channels` values each.
struct Planes {
  int64_t count, h, w;
  bool channels_last = false;
  int64_t channels = 1;
};

// Checks what the front-ends guarantee (s, when given: the sizes of x and
// out), and reads the plane geometry.
Planes check_pool_pair(const Tensor& out, const Tensor& x, const Pool2dShape* s, std::string_view op) {
  KILN_CHECK(x.is_quantized() && out.is_quantized(), op, ": expected quantized input and output, got ", x.dtype(),
             " and ", out.dtype());
  KILN_CHECK(x.dtype() == out.dtype(), op, ": input ", x.dtype(), " but output ", out.dtype());
  const auto& params = *x.impl()->quant_params();
  KILN_CHECK(params.scheme == QuantParams::Scheme::PerTensor, op, ": per-tensor quantized inputs only");
  KILN_CHECK(x.dim() >= 2 && out.dim() == x.dim(), op, ": expected (..., H, W) tensors, got ", x.shape(), " and ",
             out.shape());
  Planes p{x.numel() / std::max<int64_t>(1, x.size(-2) * x.size(-1)), x.size(-2), x.size(-1)};
  if (!(x.is_contiguous() && out.is_contiguous())) {
    KILN_CHECK(is_channels_last(x) && is_channels_last(out), op,
               ": the CPU kernel expects contiguous or channels-last tensors, got strides ", x.strides(), " and ",
               out.strides());
    KILN_CHECK(x.size(0) == out.size(0) && x.size(1) == out.size(1), op, ": input ", x.shape(), " and output ",
               out.shape(), " have different leading dims");
    p.count = x.size(0);
    p.channels = x.size(1);
    p.channels_last = true;
  } else {
    KILN_CHECK(out.numel() == p.count * out.size(-2) * out.size(-1), op, ": input ", x.shape(), " and output ",
               out.shape(), " have different leading dims");
  }
  if (s != nullptr) {
    KILN_CHECK(s->input == Size2d(p.h, p.w) && s->output == Size2d(out.size(-2), out.size(-1)), op, ": the sizes (",
               s->input.h, "x", s->input.w, " -> ", s->output.h, "x", s->output.w, ") do not match the tensors ",
               x.shape(), " -> ", out.shape());
  }
  return p;
}

// Calls fn.template operator()<T>() for the 8-bit dtypes (and qint32 when allowed).
template <class Fn>
void visit_pool_dtype(DType dtype, bool allow_int32, std::string_view op, const Fn& fn) {
  switch (dtype) {
    case DType::UInt8: return fn.template operator()<uint8_t>();
    case DType::Int8: return fn.template operator()<int8_t>();
    case DType::Int32:
      if (allow_int32) return fn.template operator()<int32_t>();
      [[fallthrough]];
    default:
      KILN_FAIL(op, ": ", dtype, " inputs are not supported (quint8 or qint8", allow_int32 ? ", qint32" : "",
                ": the sum of a window of qint32 values does not fit the int32 accumulator)");
  }
}

// The taps of one window along one dim that fall inside the input:
// indices first, first + step, ..., last (empty when first > last).
struct TapRange {
  int64_t first, count;
};

TapRange taps_inside(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t dilation, int64_t size) {
  int64_t start = o * stride - pad;
  int64_t k0 = start >= 0 ? 0 : (-start + dilation - 1) / dilation;  // the first k with start + k*dilation >= 0
  int64_t room = size - 1 - start;                                   // the last needs k*dilation <= room
  if (room < 0) return {0, 0};
  int64_t k1 = std::min(kernel - 1, room / dilation);
  return {start + k0 * dilation, std::max<int64_t>(0, k1 - k0 + 1)};
}

// The 2x2 window with stride 2 and no padding or dilation: each output
// pixel's taps are the four inputs at twice its position.
bool is_plain_2x2(const MaxPool2dOptions& o) {
  return o.kernel == Size2d(2) && o.stride_or_kernel() == Size2d(2) && o.padding == Size2d(0) &&
         o.dilation == Size2d(1);
}

// `rows` output rows of a 2x2 / stride 2 window, one after the other from
// dst; output row r from input rows 2r and 2r + 1 of src (w wide). On
// AVX-512 or AVX2 for the 8-bit dtypes (quantized_pool_simd.h).
template <class T>
void max_2x2_rows(T* __restrict dst, const T* __restrict src, int64_t w, int64_t ow, int64_t rows) {
  if (simd_level() == SimdLevel::Avx512) {
    if constexpr (std::is_same_v<T, uint8_t>) return max_pool_2x2_rows_u8_avx512(dst, src, w, ow, rows);
    if constexpr (std::is_same_v<T, int8_t>) return max_pool_2x2_rows_s8_avx512(dst, src, w, ow, rows);
  }
  if (simd_level() == SimdLevel::Avx2) {
    if constexpr (std::is_same_v<T, uint8_t>) return max_pool_2x2_rows_u8_avx2(dst, src, w, ow, rows);
    if constexpr (std::is_same_v<T, int8_t>) return max_pool_2x2_rows_s8_avx2(dst, src, w, ow, rows);
  }
  for (int64_t r = 0; r < rows; ++r, dst += ow, src += 2 * w) {
    const T* r0 = src;
    const T* r1 = src + w;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const T a = r0[2 * ox] > r0[2 * ox + 1] ? r0[2 * ox] : r0[2 * ox + 1];
      const T b = r1[2 * ox] > r1[2 * ox + 1] ? r1[2 * ox] : r1[2 * ox + 1];
      dst[ox] = a > b ? a : b;
    }
  }
}

template <class T>
void max_pool_typed(T* out, const T* x, const Planes& p, const MaxPool2dOptions& o, const Pool2dShape& s) {
  // A window with no tap inside the input (possible only with dilation)
  // gives the dtype's lowest value, as -inf for floats.
  const T lowest = std::numeric_limits<T>::lowest();
  const bool plain_2x2 = is_plain_2x2(o);
  const Size2d stride = o.stride_or_kernel();
  const int64_t oh = s.output.h, ow = s.output.w;
  // With an even height the planes' row pairs follow one another, so a run
  // of output rows may cross planes; else it stops at each plane's end.
  const bool pairs_cross_planes = p.h == 2 * oh;
  parallel_for(0, p.count * oh, kRowGrain, [&](int64_t rb, int64_t re) {
    if (plain_2x2) {
      // The common 2x2 / stride 2 window with no edge: two rows, pairwise,
      // a run of rows per call (a call per row cost as much as the rows).
      for (int64_t r = rb; r < re;) {
        const int64_t plane = r / oh, oy = r % oh;
        const int64_t rows = pairs_cross_planes ? re - r : std::min(re - r, oh - oy);
        max_2x2_rows(out + r * ow, x + plane * p.h * p.w + 2 * oy * p.w, p.w, ow, rows);
        r += rows;
      }
      return;
    }
    for (int64_t r = rb; r < re; ++r) {
      int64_t plane = r / oh, oy = r % oh;
      const T* src = x + plane * p.h * p.w;
      T* dst = out + r * ow;
      TapRange ry = taps_inside(oy, stride.h, o.padding.h, o.kernel.h, o.dilation.h, p.h);
      for (int64_t ox = 0; ox < ow; ++ox) {
        TapRange rx = taps_inside(ox, stride.w, o.padding.w, o.kernel.w, o.dilation.w, p.w);
        T best = lowest;
        for (int64_t ky = 0; ky < ry.count; ++ky) {
          const T* row = src + (ry.first + ky * o.dilation.h) * p.w + rx.first;
          for (int64_t kx = 0; kx < rx.count; ++kx) best = std::max(best, row[kx * o.dilation.w]);
        }
        dst[ox] = best;
      }
    }
  });
}

// The divisor of the window starting at `start` along one dim, before a
// divisor_override: its taps clipped to the padded input (count_include_pad)
// or to the input, as torch's avg_pool2d and the float kernel.
int64_t window_count(int64_t start, int64_t kernel, int64_t pad, int64_t size, bool count_include_pad) {
  int64_t end = std::min(start + kernel, size + pad);
  int64_t inside = std::min(end, size) - std::max(start, int64_t{0});
  return inside <= 0 ? 0 : count_include_pad ? end - start : inside;
}

template <class T>
void avg_pool_typed(T* out, const T* x, const Planes& p, const AvgPool2dOptions& o, const Pool2dShape& s,
                    int32_t zero_point, quant_math::QRange range) {
  const float zp = static_cast<float>(zero_point), lo = static_cast<float>(range.lo),
              hi = static_cast<float>(range.hi);
  const Size2d stride = o.stride_or_kernel();
  const int64_t oh = s.output.h, ow = s.output.w;
  parallel_for(0, p.count * oh, kRowGrain, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      int64_t plane = r / oh, oy = r % oh;
      const T* src = x + plane * p.h * p.w;
      T* dst = out + r * ow;
      int64_t y0 = oy * stride.h - o.padding.h;
      int64_t rows = window_count(y0, o.kernel.h, o.padding.h, p.h, o.count_include_pad);
      int64_t ys = std::max<int64_t>(y0, 0), ye = std::min(y0 + o.kernel.h, p.h);
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t x0 = ox * stride.w - o.padding.w;
        int64_t cols = window_count(x0, o.kernel.w, o.padding.w, p.w, o.count_include_pad);
        int64_t xs = std::max<int64_t>(x0, 0), xe = std::min(x0 + o.kernel.w, p.w);
        if (rows == 0 || cols == 0) {
          dst[ox] = static_cast<T>(zero_point);  // no element inside the input: real 0
          continue;
        }
        int32_t sum = 0;  // of q - zero_point: exact, a window holds far fewer than 2^23 taps
        for (int64_t iy = ys; iy < ye; ++iy) {
          const T* row = src + iy * p.w;
          for (int64_t ix = xs; ix < xe; ++ix) sum += static_cast<int32_t>(row[ix]) - zero_point;
        }
        auto divisor = static_cast<int32_t>(o.divisor_override ? *o.divisor_override : rows * cols);
        dst[ox] = static_cast<T>(quant_math::average_value(sum, divisor, zp, lo, hi));
      }
    }
  });
}

// Window [start, end) of output o of `out` over `size` inputs, as torch:
// start = floor(o*size/out), end = ceil((o+1)*size/out).
struct Window {
  int64_t start, end;
};
Window adaptive_window(int64_t o, int64_t out, int64_t size) {
  return {o * size / out, ((o + 1) * size + out - 1) / out};
}

template <class T>
void adaptive_avg_pool_typed(T* out, const T* x, const Planes& p, int64_t oh, int64_t ow, int32_t zero_point,
                             quant_math::QRange range) {
  const float zp = static_cast<float>(zero_point), lo = static_cast<float>(range.lo),
              hi = static_cast<float>(range.hi);
  parallel_for(0, p.count * oh, kRowGrain, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      int64_t plane = r / oh, oy = r % oh;
      const T* src = x + plane * p.h * p.w;
      Window wy = adaptive_window(oy, oh, p.h);
      for (int64_t ox = 0; ox < ow; ++ox) {
        Window wx = adaptive_window(ox, ow, p.w);
        int32_t sum = 0;
        for (int64_t iy = wy.start; iy < wy.end; ++iy) {
          const T* row = src + iy * p.w;
          for (int64_t ix = wx.start; ix < wx.end; ++ix) sum += static_cast<int32_t>(row[ix]) - zero_point;
        }
        auto divisor = static_cast<int32_t>((wy.end - wy.start) * (wx.end - wx.start));
        out[r * ow + ox] = static_cast<T>(quant_math::average_value(sum, divisor, zp, lo, hi));
      }
    }
  });
}

// ---- channels-last: x (N, H, W, C) and out (N, oh, ow, C) in memory ----

// Calls fn(dst, image, oy, ox) for every output pixel, dst its C values.
template <class T, class Fn>
void for_each_output_pixel(T* out, const Planes& p, int64_t oh, int64_t ow, const Fn& fn) {
  parallel_for(0, p.count * oh, std::max<int64_t>(1, kRowGrain / std::max<int64_t>(1, ow)), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const int64_t image = r / oh, oy = r % oh;
      for (int64_t ox = 0; ox < ow; ++ox) fn(out + (r * ow + ox) * p.channels, image, oy, ox);
    }
  });
}

// dst[i] = max(dst[i], src[i]) for i < c; the pointers do not alias (the
// output is not the input), so the loop vectorizes.
template <class T>
void max_into(T* __restrict dst, const T* __restrict src, int64_t c) {
  for (int64_t i = 0; i < c; ++i) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
}

// One output row of a 2x2 / stride 2 window over channels-last rows r0 and
// r1: pixel ox's c values from input pixels 2ox and 2ox + 1 of both. The
// inner loop vectorizes over the channels.
template <class T>
void max_2x2_row_channels_last(T* __restrict dst, const T* __restrict r0, const T* __restrict r1, int64_t ow,
                               int64_t c) {
  for (int64_t ox = 0; ox < ow; ++ox, dst += c, r0 += 2 * c, r1 += 2 * c) {
    for (int64_t i = 0; i < c; ++i) {
      const T a = r0[i] > r0[i + c] ? r0[i] : r0[i + c];
      const T b = r1[i] > r1[i + c] ? r1[i] : r1[i + c];
      dst[i] = a > b ? a : b;
    }
  }
}

template <class T>
void max_pool_channels_last(T* out, const T* x, const Planes& p, const MaxPool2dOptions& o, const Pool2dShape& s) {
  const T lowest = std::numeric_limits<T>::lowest();
  const int64_t c = p.channels;
  const Size2d stride = o.stride_or_kernel();
  const int64_t oh = s.output.h, ow = s.output.w;
  if (is_plain_2x2(o)) {
    // The common window, a row at a time: the general walk below finds
    // each pixel's taps with divisions, which cost more than the maxima.
    parallel_for(0, p.count * oh, std::max<int64_t>(1, kRowGrain / std::max<int64_t>(1, ow)),
                 [&](int64_t rb, int64_t re) {
                   for (int64_t r = rb; r < re; ++r) {
                     const int64_t image = r / oh, oy = r % oh;
                     const T* r0 = x + (image * p.h + 2 * oy) * p.w * c;
                     max_2x2_row_channels_last(out + r * ow * c, r0, r0 + p.w * c, ow, c);
                   }
                 });
    return;
  }
  for_each_output_pixel(out, p, oh, ow, [&](T* dst, int64_t image, int64_t oy, int64_t ox) {
    std::fill(dst, dst + c, lowest);
    TapRange ry = taps_inside(oy, stride.h, o.padding.h, o.kernel.h, o.dilation.h, p.h);
    TapRange rx = taps_inside(ox, stride.w, o.padding.w, o.kernel.w, o.dilation.w, p.w);
    for (int64_t ky = 0; ky < ry.count; ++ky) {
      for (int64_t kx = 0; kx < rx.count; ++kx) {
        max_into(dst, x + ((image * p.h + ry.first + ky * o.dilation.h) * p.w + rx.first + kx * o.dilation.w) * c, c);
      }
    }
  });
}

// Sums q - zero_point over the window rows [ys, ye) x cols [xs, xe) of one
// image into sum (C values), then rounds each mean onto the grid.
template <class T>
void average_pixel(T* dst, const T* x, const Planes& p, int64_t image, int64_t ys, int64_t ye, int64_t xs, int64_t xe,
                   int32_t divisor, int32_t zero_point, float zp, float lo, float hi) {
  const int64_t c = p.channels;
  thread_local std::vector<int32_t> sum;
  sum.assign(static_cast<size_t>(c), 0);
  int32_t* __restrict acc = sum.data();
  for (int64_t iy = ys; iy < ye; ++iy) {
    for (int64_t ix = xs; ix < xe; ++ix) {
      const T* __restrict src = x + ((image * p.h + iy) * p.w + ix) * c;
      for (int64_t i = 0; i < c; ++i) acc[i] += static_cast<int32_t>(src[i]) - zero_point;
    }
  }
  for (int64_t i = 0; i < c; ++i) dst[i] = static_cast<T>(quant_math::average_value(sum[i], divisor, zp, lo, hi));
}

template <class T>
void avg_pool_channels_last(T* out, const T* x, const Planes& p, const AvgPool2dOptions& o, const Pool2dShape& s,
                            int32_t zero_point, quant_math::QRange range) {
  const float zp = static_cast<float>(zero_point), lo = static_cast<float>(range.lo),
              hi = static_cast<float>(range.hi);
  const Size2d stride = o.stride_or_kernel();
  for_each_output_pixel(out, p, s.output.h, s.output.w, [&](T* dst, int64_t image, int64_t oy, int64_t ox) {
    const int64_t y0 = oy * stride.h - o.padding.h, x0 = ox * stride.w - o.padding.w;
    const int64_t rows = window_count(y0, o.kernel.h, o.padding.h, p.h, o.count_include_pad);
    const int64_t cols = window_count(x0, o.kernel.w, o.padding.w, p.w, o.count_include_pad);
    if (rows == 0 || cols == 0) {
      std::fill(dst, dst + p.channels, static_cast<T>(zero_point));  // no element inside the input: real 0
      return;
    }
    auto divisor = static_cast<int32_t>(o.divisor_override ? *o.divisor_override : rows * cols);
    average_pixel(dst, x, p, image, std::max<int64_t>(y0, 0), std::min(y0 + o.kernel.h, p.h), std::max<int64_t>(x0, 0),
                  std::min(x0 + o.kernel.w, p.w), divisor, zero_point, zp, lo, hi);
  });
}

template <class T>
void adaptive_avg_pool_channels_last(T* out, const T* x, const Planes& p, int64_t oh, int64_t ow, int32_t zero_point,
                                     quant_math::QRange range) {
  const float zp = static_cast<float>(zero_point), lo = static_cast<float>(range.lo),
              hi = static_cast<float>(range.hi);
  for_each_output_pixel(out, p, oh, ow, [&](T* dst, int64_t image, int64_t oy, int64_t ox) {
    const Window wy = adaptive_window(oy, oh, p.h), wx = adaptive_window(ox, ow, p.w);
    auto divisor = static_cast<int32_t>((wy.end - wy.start) * (wx.end - wx.start));
    average_pixel(dst, x, p, image, wy.start, wy.end, wx.start, wx.end, divisor, zero_point, zp, lo, hi);
  });
}

}  // namespace

void CpuQuantizedKernels::max_pool2d(const Tensor& out, const Tensor& x, const MaxPool2dOptions& o,
                                     const Pool2dShape& s) {
  constexpr std::string_view op = "quantized max_pool2d";
  Planes p = check_pool_pair(out, x, &s, op);
  visit_pool_dtype(x.dtype(), /*allow_int32=*/true, op, [&]<class T>() {
    T* dst = static_cast<T*>(out.data_ptr());
    const T* src = static_cast<const T*>(x.data_ptr());
    if (p.channels_last) max_pool_channels_last(dst, src, p, o, s);
    else max_pool_typed(dst, src, p, o, s);
  });
}

void CpuQuantizedKernels::avg_pool2d(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o,
                                     const Pool2dShape& s) {
  constexpr std::string_view op = "quantized avg_pool2d";
  Planes p = check_pool_pair(out, x, &s, op);
  KILN_CHECK(!o.divisor_override || *o.divisor_override != 0, op, ": divisor_override must be non-zero");
  const auto zp = static_cast<int32_t>(x.impl()->quant_params()->zero_points[0]);
  visit_pool_dtype(x.dtype(), /*allow_int32=*/false, op, [&]<class T>() {
    T* dst = static_cast<T*>(out.data_ptr());
    const T* src = static_cast<const T*>(x.data_ptr());
    if (p.channels_last) {
      avg_pool_channels_last(dst, src, p, o, s, zp, quant_math::qrange(x.dtype()));
    } else {
      avg_pool_typed(dst, src, p, o, s, zp, quant_math::qrange(x.dtype()));
    }
  });
}

void CpuQuantizedKernels::adaptive_avg_pool2d(const Tensor& out, const Tensor& x) {
  constexpr std::string_view op = "quantized adaptive_avg_pool2d";
  Planes p = check_pool_pair(out, x, nullptr, op);
  const auto zp = static_cast<int32_t>(x.impl()->quant_params()->zero_points[0]);
  visit_pool_dtype(x.dtype(), /*allow_int32=*/false, op, [&]<class T>() {
    T* dst = static_cast<T*>(out.data_ptr());
    const T* src = static_cast<const T*>(x.data_ptr());
    if (p.channels_last) {
      adaptive_avg_pool_channels_last(dst, src, p, out.size(-2), out.size(-1), zp, quant_math::qrange(x.dtype()));
    } else {
      adaptive_avg_pool_typed(dst, src, p, out.size(-2), out.size(-1), zp, quant_math::qrange(x.dtype()));
    }
  });
}

}  // namespace kiln::cpu
