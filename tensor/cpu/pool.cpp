// CPU 2-d pooling: max, average and adaptive average, forward and backward.
//
// All tensors arrive contiguous as P = N*C planes (tensor/backend.h), with
// the op's options and the sizes (Note [One pooling parameter struct] in
// tensor/pool.h), and threads split the planes: each plane is read and
// written by one thread in a fixed order, so results (backward sums
// included) do not depend on the thread count and need no atomics.
//
// Max and average pooling walk the window taps outside the output columns.
// For one kernel tap (ki, kj) the outputs whose tap lands inside the input
// form one interval of output rows and one of output columns (as in
// tensor/cpu/im2col.cpp), computed once per call. A row of outputs then
// takes, tap by tap, a strided run of one input row:
//   sum[ox] += in[iy][ox*stride_w + kj*dilation_w - pad_w]
// for ox in the tap's interval, so padding, dilation and ceil_mode cost no
// test and no division in the inner loop. Taps go in row-major window
// order, which keeps torch's tie and NaN rules and its summation order.
//
// Max pooling updates its running maxima with selects, not branches: on
// real data "is this tap larger" is a coin flip that mispredicts, and the
// select form vectorizes. Windows of dense_2x2 (LeNet's 2x2/stride 2) take
// fused loops that read each window once. Single-threaded on (64, 6, 28, 28)
// float32 this took max pooling from 1020 us (branches) to 124 us, the
// general path (3x3, stride 2, padding 1) from 2900 us to 840 us, and 2x2
// average pooling from 270 us to 116 us. Float32 2x2 max pooling without
// indices (inference) runs an AVX2 kernel (tensor/cpu/pool_avx2.cpp) when
// the rows are exactly two windows wide.
//
// 16-bit floats compute in float (ComputeType) through per-thread scratch
// rows and planes; float32 and float64 work in the tensors directly.
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/pool_avx2.h"

namespace kiln::cpu {
namespace {

// Window taps (or input elements) visited per thread below which the work
// stays on the calling thread.
constexpr int64_t kPoolGrain = 1 << 14;

int64_t plane_grain(int64_t work_per_plane) {
  return std::max<int64_t>(1, kPoolGrain / std::max<int64_t>(work_per_plane, 1));
}

// One kernel tap along one dim: its offset from the window start, and the
// outputs [lo, hi) for which the tap lands inside the input.
struct Tap {
  int64_t offset;  // k * dilation - pad
  int64_t lo, hi;
};

// The taps of a kernel along one dim of `size` inputs and `out` outputs.
std::vector<Tap> taps(int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, int64_t size, int64_t out) {
  std::vector<Tap> result(kernel);
  for (int64_t k = 0; k < kernel; ++k) {
    int64_t offset = k * dilation - pad;
    // o*stride + offset >= 0 and < size.
    int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t hi = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
    lo = std::min(lo, out);
    result[k] = {offset, lo, std::clamp(hi, lo, out)};
  }
  return result;
}

// 2x2 windows at stride 2 without padding or dilation, all inside the input
// (ceil_mode may add a last window that overhangs it): LeNet's pooling. Max
// and average pooling both take it, average pooling with dilation 1.
bool dense_2x2(Size2d kernel, Size2d stride, Size2d padding, Size2d dilation, const Pool2dShape& s) {
  return kernel == Size2d(2) && stride == Size2d(2) && padding == Size2d(0) && dilation == Size2d(1) &&
         2 * s.output.h <= s.input.h && 2 * s.output.w <= s.input.w;
}

// ---- max pooling ----

// Whether tap value v replaces the running maximum m: when larger, or NaN
// (NaN wins over everything, a later NaN over an earlier one). Callers use it
// in selects, never as a branch (see the top of this file).
template <class Acc>
inline bool replaces(Acc v, Acc m) {
  return (v > m) | (v != v);
}

// One output row of the general path, one tap at a time. The tap's strided
// run of an input row is first copied into `run` (ow), so that the update
// reads unit-stride arrays and vectorizes. best: (ow), the running maxima
// from -inf; code: (ow), the winning tap as its offset in the plane from the
// window's top-left corner (which may lie in the padding), -1 until a tap
// inside the input has been seen.
template <class T, class Acc, class Code>
void max_pool_row(Acc* best, Code* code, Acc* run, const T* plane, int64_t oy, const MaxPool2dOptions& o,
                  const Pool2dShape& s, const std::vector<Tap>& rows, const std::vector<Tap>& cols) {
  const Size2d stride = o.stride_or_kernel();
  const int64_t width = s.input.w, out_w = s.output.w;
  std::fill(best, best + out_w, -std::numeric_limits<Acc>::infinity());
  std::fill(code, code + out_w, Code{-1});
  for (int64_t ki = 0; ki < o.kernel.h; ++ki) {
    const Tap& r = rows[ki];
    if (oy < r.lo || oy >= r.hi) continue;
    const T* src = plane + (oy * stride.h + r.offset) * width;  // input row: (W)
    for (int64_t kj = 0; kj < o.kernel.w; ++kj) {
      const Tap& c = cols[kj];
      auto tap = static_cast<Code>(ki * o.dilation.h * width + kj * o.dilation.w);
      for (int64_t ox = c.lo; ox < c.hi; ++ox) run[ox] = static_cast<Acc>(src[ox * stride.w + c.offset]);
      for (int64_t ox = c.lo; ox < c.hi; ++ox) {
        // The first tap inside the input is taken whatever its value: an
        // all -inf window reports it, as torch.
        bool take = replaces(run[ox], best[ox]) | (code[ox] < 0);
        best[ox] = take ? run[ox] : best[ox];
        code[ox] = take ? tap : code[ox];
      }
    }
  }
}

// One output row of dense_2x2 windows. The four taps of a window are
// compared in registers and the winner is recorded in `offset` (ow) as its
// offset from the window's top-left element; a second loop turns offsets
// into plane indices.
template <class T, class Acc, class Code>
void max_pool_row_2x2(Acc* best, int64_t* where, Code* offset, const T* plane, int64_t oy, int64_t width,
                      int64_t out_w) {
  // where == nullptr: values only.
  const T* top = plane + 2 * oy * width;  // input rows 2*oy, 2*oy + 1: (W)
  const T* bottom = top + width;
  auto w = static_cast<Code>(width);
  for (int64_t ox = 0; ox < out_w; ++ox) {
    Acc m = static_cast<Acc>(top[2 * ox]);
    Acc b = static_cast<Acc>(top[2 * ox + 1]);
    Acc c = static_cast<Acc>(bottom[2 * ox]);
    Acc d = static_cast<Acc>(bottom[2 * ox + 1]);
    Code k = 0;
    bool take = replaces(b, m);
    m = take ? b : m;
    k = take ? 1 : k;
    take = replaces(c, m);
    m = take ? c : m;
    k = take ? w : k;
    take = replaces(d, m);
    m = take ? d : m;
    k = take ? w + 1 : k;
    best[ox] = m;
    offset[ox] = k;
  }
  if (where == nullptr) return;
  int64_t corner = 2 * oy * width;
  for (int64_t ox = 0; ox < out_w; ++ox) where[ox] = corner + 2 * ox + offset[ox];
}

template <class T, class Code>
void max_pool_typed(const Tensor& values, const Tensor& indices, const Tensor& x, const MaxPool2dOptions& o,
                    const Pool2dShape& s) {
  using Acc = ComputeType<T>;
  // x: (P, H, W); values, indices: (P, oh, ow)
  const T* x_data = static_cast<const T*>(x.data_ptr());
  T* v_data = values.data<T>();
  int64_t* i_data = indices.defined() ? indices.data<int64_t>() : nullptr;  // null: values only
  const Size2d stride = o.stride_or_kernel();
  const int64_t width = s.input.w, out_h = s.output.h, out_w = s.output.w;
  int64_t in_plane = s.input.h * width, out_plane = out_h * out_w;
  bool two_by_two = dense_2x2(o.kernel, stride, o.padding, o.dilation, s);
  if constexpr (std::is_same_v<T, float>) {
    // Values only, rows exactly two windows wide: the AVX2 kernel.
    if (two_by_two && !i_data && width == 2 * out_w && simd_level() >= SimdLevel::Avx2) {
      parallel_for(0, x.size(0), plane_grain(in_plane), [&](int64_t begin, int64_t end) {
        std::vector<float> hbuf(2 * out_plane);  // (2*oh, ow)
        for (int64_t p = begin; p < end; ++p) {
          max_pool_2x2_values_avx2(x_data + p * in_plane, v_data + p * out_plane, hbuf.data(), out_h, out_w);
        }
      });
      return;
    }
  }
  std::vector<Tap> rows = taps(o.kernel.h, stride.h, o.padding.h, o.dilation.h, s.input.h, out_h);
  std::vector<Tap> cols = taps(o.kernel.w, stride.w, o.padding.w, o.dilation.w, width, out_w);

  parallel_for(0, x.size(0), plane_grain(out_plane * o.kernel.h * o.kernel.w), [&](int64_t begin, int64_t end) {
    std::vector<Acc> scratch(std::is_same_v<T, Acc> ? 2 * out_w : 3 * out_w);  // run, [best]: (ow) each
    std::vector<Code> code(out_w);                                             // (ow)
    for (int64_t p = begin; p < end; ++p) {
      const T* plane = x_data + p * in_plane;
      for (int64_t oy = 0; oy < out_h; ++oy) {
        T* out_row = v_data + p * out_plane + oy * out_w;
        int64_t* where = i_data ? i_data + p * out_plane + oy * out_w : nullptr;
        Acc* run = scratch.data();
        Acc* best;
        if constexpr (std::is_same_v<T, Acc>) {
          best = out_row;
        } else {
          best = scratch.data() + out_w;
        }
        if (two_by_two) {
          max_pool_row_2x2<T, Acc, Code>(best, where, code.data(), plane, oy, width, out_w);
        } else {
          max_pool_row<T, Acc, Code>(best, code.data(), run, plane, oy, o, s, rows, cols);
          int64_t corner = (oy * stride.h - o.padding.h) * width - o.padding.w;  // window (oy, 0)
          for (int64_t ox = 0; where && ox < out_w; ++ox) {
            where[ox] = code[ox] < 0 ? -1 : corner + ox * stride.w + code[ox];
          }
        }
        if constexpr (!std::is_same_v<T, Acc>) {
          for (int64_t ox = 0; ox < out_w; ++ox) out_row[ox] = static_cast<T>(best[ox]);
        }
      }
    }
  });
}

// Runs fn(acc, p, row) for each plane p of grad_x with acc a zeroed (H*W)
// plane of the compute type to accumulate into, then stores it: float32 and
// float64 accumulate in grad_x itself, 16-bit floats in a per-thread float
// plane. row: per-thread scratch of row_size elements.
template <class T, class Fn>
void accumulate_planes(const Tensor& grad_x, int64_t grain, int64_t row_size, const Fn& fn) {
  using Acc = ComputeType<T>;
  // grad_x: (P, H, W)
  T* gx = grad_x.data<T>();
  int64_t plane_size = grad_x.size(1) * grad_x.size(2);
  parallel_for(0, grad_x.size(0), grain, [&](int64_t begin, int64_t end) {
    std::vector<Acc> scratch(std::is_same_v<T, Acc> ? 0 : plane_size);  // (H*W)
    std::vector<Acc> row(row_size);
    for (int64_t p = begin; p < end; ++p) {
      T* plane = gx + p * plane_size;
      Acc* acc;
      if constexpr (std::is_same_v<T, Acc>) {
        acc = plane;
      } else {
        acc = scratch.data();
      }
      std::fill(acc, acc + plane_size, Acc{});
      fn(acc, p, row.data());
      if constexpr (!std::is_same_v<T, Acc>) {
        for (int64_t i = 0; i < plane_size; ++i) plane[i] = static_cast<T>(acc[i]);
      }
    }
  });
}

template <class T>
void max_pool_backward_typed(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices) {
  using Acc = ComputeType<T>;
  // grad_out, indices: (P, oh, ow)
  const T* go = static_cast<const T*>(grad_out.data_ptr());
  const int64_t* ind = static_cast<const int64_t*>(indices.data_ptr());
  int64_t plane_size = grad_x.size(1) * grad_x.size(2);
  int64_t out_plane = grad_out.size(1) * grad_out.size(2);
  accumulate_planes<T>(grad_x, plane_grain(std::max(out_plane, plane_size)), 0, [&](Acc* acc, int64_t p, Acc*) {
    const T* g = go + p * out_plane;
    const int64_t* where = ind + p * out_plane;
    for (int64_t i = 0; i < out_plane; ++i) {
      int64_t at = where[i];
      if (at == -1) continue;
      KILN_CHECK(at >= 0 && at < plane_size, "max_pool2d_backward: index ", at, " at position ", i, " of plane ",
                 p, " is outside the input plane of ", grad_x.size(1), " x ", grad_x.size(2), " elements");
      acc[at] += static_cast<Acc>(g[i]);
    }
  });
}

// ---- average pooling ----

// The divisor of each window along one dim, so that window (oy, ox) divides
// by rows[oy] * cols[ox]: the tap count clipped to the padded input
// (count_include_pad) or to the input, as torch's avg_pool2d; 0 marks a
// window with no element inside the input, whose output is 0.
std::vector<int64_t> window_counts(int64_t kernel, int64_t stride, int64_t pad, int64_t size, int64_t out,
                                   bool count_include_pad) {
  std::vector<int64_t> counts(out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * stride - pad;
    int64_t end = std::min(start + kernel, size + pad);
    int64_t inside = std::min(end, size) - std::max(start, int64_t{0});
    counts[o] = inside <= 0 ? 0 : count_include_pad ? end - start : inside;
  }
  return counts;
}

// rows, cols: the per-dim window counts; a divisor_override replaces their
// product (rows = override, cols = 1), keeping the empty-window zeros.
struct Divisors {
  std::vector<int64_t> rows, cols;
};

Divisors divisors(const AvgPool2dOptions& o, const Pool2dShape& s) {
  const Size2d stride = o.stride_or_kernel();
  Divisors d{window_counts(o.kernel.h, stride.h, o.padding.h, s.input.h, s.output.h, o.count_include_pad),
             window_counts(o.kernel.w, stride.w, o.padding.w, s.input.w, s.output.w, o.count_include_pad)};
  if (o.divisor_override) {
    for (int64_t& r : d.rows) r = r == 0 ? 0 : *o.divisor_override;
    for (int64_t& c : d.cols) c = c == 0 ? 0 : 1;
  }
  return d;
}

template <class T>
void avg_pool_typed(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o, const Pool2dShape& s,
                    const Divisors& div) {
  using Acc = ComputeType<T>;
  // x: (P, H, W); out: (P, oh, ow)
  const T* x_data = static_cast<const T*>(x.data_ptr());
  T* o_data = out.data<T>();
  const Size2d stride = o.stride_or_kernel();
  const int64_t width = s.input.w, out_h = s.output.h, out_w = s.output.w;
  int64_t in_plane = s.input.h * width, out_plane = out_h * out_w;
  std::vector<Tap> rows = taps(o.kernel.h, stride.h, o.padding.h, 1, s.input.h, out_h);
  std::vector<Tap> cols = taps(o.kernel.w, stride.w, o.padding.w, 1, width, out_w);

  bool two_by_two = dense_2x2(o.kernel, stride, o.padding, 1, s);

  parallel_for(0, x.size(0), plane_grain(out_plane * o.kernel.h * o.kernel.w), [&](int64_t begin, int64_t end) {
    std::vector<Acc> sum(out_w);  // (ow)
    for (int64_t p = begin; p < end; ++p) {
      const T* plane = x_data + p * in_plane;
      for (int64_t oy = 0; oy < out_h; ++oy) {
        if (two_by_two) {
          // The general path's sum in the same order, 0 + a + b + c + d, so
          // that both paths round alike.
          const T* top = plane + 2 * oy * width;  // input rows 2*oy, 2*oy + 1: (W)
          const T* bottom = top + width;
          for (int64_t ox = 0; ox < out_w; ++ox) {
            sum[ox] = Acc{} + static_cast<Acc>(top[2 * ox]) + static_cast<Acc>(top[2 * ox + 1]) +
                      static_cast<Acc>(bottom[2 * ox]) + static_cast<Acc>(bottom[2 * ox + 1]);
          }
        } else {
          std::fill(sum.begin(), sum.end(), Acc{});
          for (const Tap& r : rows) {
            if (oy < r.lo || oy >= r.hi) continue;
            const T* src = plane + (oy * stride.h + r.offset) * width;  // (W)
            for (const Tap& c : cols) {
              for (int64_t ox = c.lo; ox < c.hi; ++ox) sum[ox] += static_cast<Acc>(src[ox * stride.w + c.offset]);
            }
          }
        }
        T* dst = o_data + p * out_plane + oy * out_w;  // (ow)
        for (int64_t ox = 0; ox < out_w; ++ox) {
          int64_t divisor = div.rows[oy] * div.cols[ox];
          dst[ox] = divisor == 0 ? T{} : static_cast<T>(sum[ox] / static_cast<Acc>(divisor));
        }
      }
    }
  });
}

template <class T>
void avg_pool_backward_typed(const Tensor& grad_x, const Tensor& grad_out, const AvgPool2dOptions& o,
                             const Pool2dShape& s, const Divisors& div) {
  using Acc = ComputeType<T>;
  // grad_out: (P, oh, ow); grad_x: (P, H, W)
  const T* go = static_cast<const T*>(grad_out.data_ptr());
  const Size2d stride = o.stride_or_kernel();
  const int64_t width = s.input.w, out_h = s.output.h, out_w = s.output.w;
  int64_t out_plane = out_h * out_w;
  std::vector<Tap> rows = taps(o.kernel.h, stride.h, o.padding.h, 1, s.input.h, out_h);
  std::vector<Tap> cols = taps(o.kernel.w, stride.w, o.padding.w, 1, width, out_w);
  int64_t grain = plane_grain(std::max(out_plane * o.kernel.h * o.kernel.w, s.input.h * width));
  bool two_by_two = dense_2x2(o.kernel, stride, o.padding, 1, s);
  // share: (ow), each output's gradient over its divisor.
  accumulate_planes<T>(grad_x, grain, out_w, [&](Acc* acc, int64_t p, Acc* share) {
    for (int64_t oy = 0; oy < out_h; ++oy) {
      const T* src = go + p * out_plane + oy * out_w;  // (ow)
      for (int64_t ox = 0; ox < out_w; ++ox) {
        int64_t divisor = div.rows[oy] * div.cols[ox];
        share[ox] = divisor == 0 ? Acc{} : static_cast<Acc>(src[ox]) / static_cast<Acc>(divisor);
      }
      if (two_by_two) {
        Acc* top = acc + 2 * oy * width;  // input rows 2*oy, 2*oy + 1: (W)
        Acc* bottom = top + width;
        for (int64_t ox = 0; ox < out_w; ++ox) {
          top[2 * ox] += share[ox];
          top[2 * ox + 1] += share[ox];
          bottom[2 * ox] += share[ox];
          bottom[2 * ox + 1] += share[ox];
        }
        continue;
      }
      for (const Tap& r : rows) {
        if (oy < r.lo || oy >= r.hi) continue;
        Acc* dst = acc + (oy * stride.h + r.offset) * width;  // input row: (W)
        for (const Tap& c : cols) {
          for (int64_t ox = c.lo; ox < c.hi; ++ox) dst[ox * stride.w + c.offset] += share[ox];
        }
      }
    }
  });
}

// ---- adaptive average pooling ----

// Window [start, end) of each of `out` outputs over `size` inputs, as torch:
// start = floor(o*size/out), end = ceil((o+1)*size/out).
struct Window {
  int64_t start, end;
};
std::vector<Window> adaptive_windows(int64_t size, int64_t out) {
  std::vector<Window> w(out);
  for (int64_t o = 0; o < out; ++o) w[o] = {o * size / out, ((o + 1) * size + out - 1) / out};
  return w;
}

template <class T>
void adaptive_avg_pool_typed(const Tensor& out, const Tensor& x) {
  using Acc = ComputeType<T>;
  // x: (P, H, W); out: (P, oh, ow)
  const T* x_data = static_cast<const T*>(x.data_ptr());
  T* o_data = out.data<T>();
  int64_t width = x.size(2), oh = out.size(1), ow = out.size(2);
  int64_t in_plane = x.size(1) * width, out_plane = oh * ow;
  std::vector<Window> rows = adaptive_windows(x.size(1), oh);
  std::vector<Window> cols = adaptive_windows(width, ow);
  parallel_for(0, x.size(0), plane_grain(std::max(in_plane, out_plane)), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T* plane = x_data + p * in_plane;
      T* dst = o_data + p * out_plane;
      for (int64_t oy = 0; oy < oh; ++oy) {
        const Window& r = rows[oy];
        for (int64_t ox = 0; ox < ow; ++ox) {
          const Window& c = cols[ox];
          Acc sum{};
          for (int64_t iy = r.start; iy < r.end; ++iy) {
            const T* src = plane + iy * width;
            for (int64_t ix = c.start; ix < c.end; ++ix) sum += static_cast<Acc>(src[ix]);
          }
          // Two divisions, not one by the area, to round as torch does.
          dst[oy * ow + ox] = static_cast<T>(sum / static_cast<Acc>(r.end - r.start) / static_cast<Acc>(c.end - c.start));
        }
      }
    }
  });
}

template <class T>
void adaptive_avg_pool_backward_typed(const Tensor& grad_x, const Tensor& grad_out) {
  using Acc = ComputeType<T>;
  // grad_out: (P, oh, ow); grad_x: (P, H, W)
  const T* go = static_cast<const T*>(grad_out.data_ptr());
  int64_t width = grad_x.size(2), oh = grad_out.size(1), ow = grad_out.size(2);
  int64_t out_plane = oh * ow;
  std::vector<Window> rows = adaptive_windows(grad_x.size(1), oh);
  std::vector<Window> cols = adaptive_windows(width, ow);
  int64_t grain = plane_grain(std::max(grad_x.size(1) * width, out_plane));
  accumulate_planes<T>(grad_x, grain, 0, [&](Acc* acc, int64_t p, Acc*) {
    const T* g = go + p * out_plane;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const Window& r = rows[oy];
      for (int64_t ox = 0; ox < ow; ++ox) {
        const Window& c = cols[ox];
        Acc share = static_cast<Acc>(g[oy * ow + ox]) / static_cast<Acc>(r.end - r.start) /
                    static_cast<Acc>(c.end - c.start);
        for (int64_t iy = r.start; iy < r.end; ++iy) {
          Acc* dst = acc + iy * width;
          for (int64_t ix = c.start; ix < c.end; ++ix) dst[ix] += share;
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::max_pool2d(const Tensor& values, const Tensor& indices, const Tensor& x, const MaxPool2dOptions& o,
                            const Pool2dShape& s) {
  // The winner codes (tap offsets within a window, at most W + 1 on the 2x2
  // path) are int32 beside float maxima when they fit, so that both have
  // one width and the update vectorizes.
  int64_t reach = (o.kernel.h - 1) * o.dilation.h * s.input.w + (o.kernel.w - 1) * o.dilation.w + s.input.w;
  bool narrow = reach < std::numeric_limits<int32_t>::max();
  visit_floating_dtype(x.dtype(), "max_pool2d", [&]<class T>() {
    if (std::is_same_v<ComputeType<T>, float> && narrow) {
      max_pool_typed<T, int32_t>(values, indices, x, o, s);
    } else {
      max_pool_typed<T, int64_t>(values, indices, x, o, s);
    }
  });
}

// The CPU scatters each index where it points, which needs neither the
// options nor the sizes.
void CpuBackend::max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                     const MaxPool2dOptions&, const Pool2dShape&) {
  visit_floating_dtype(grad_x.dtype(), "max_pool2d_backward",
                       [&]<class T>() { max_pool_backward_typed<T>(grad_x, grad_out, indices); });
}

void CpuBackend::avg_pool2d(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o, const Pool2dShape& s) {
  Divisors div = divisors(o, s);
  visit_floating_dtype(x.dtype(), "avg_pool2d", [&]<class T>() { avg_pool_typed<T>(out, x, o, s, div); });
}

void CpuBackend::avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const AvgPool2dOptions& o,
                                     const Pool2dShape& s) {
  Divisors div = divisors(o, s);
  visit_floating_dtype(grad_x.dtype(), "avg_pool2d_backward",
                       [&]<class T>() { avg_pool_backward_typed<T>(grad_x, grad_out, o, s, div); });
}

void CpuBackend::adaptive_avg_pool2d(const Tensor& out, const Tensor& x) {
  visit_floating_dtype(x.dtype(), "adaptive_avg_pool2d", [&]<class T>() { adaptive_avg_pool_typed<T>(out, x); });
}

void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out) {
  visit_floating_dtype(grad_x.dtype(), "adaptive_avg_pool2d_backward",
                       [&]<class T>() { adaptive_avg_pool_backward_typed<T>(grad_x, grad_out); });
}

}  // namespace kiln::cpu
