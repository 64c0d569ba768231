// CPU quantize, dequantize and requantize (CpuQuantizedKernels), per tensor
// and per channel, for quint8, qint8 and qint32, with Note [Quantization
// arithmetic]'s roundings. The work is done on contiguous runs that share
// one scale and zero point: the whole tensor per tensor, one channel's inner
// block per channel; the 8-bit runs go through the SIMD loops of
// quantize_simd.h. Strided tensors are copied to and from contiguous ones.
#include <cmath>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/quantize_simd.h"
#include "tensor/quant_math.h"

namespace kiln::cpu {

// ---- the scalar loops of quantize_simd.h ----

void quantize_u8_scalar(uint8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<uint8_t>(quant_math::quantize_value(in[i], inv_scale, zero_point, lo, hi));
}

void quantize_s8_scalar(int8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<int8_t>(quant_math::quantize_value(in[i], inv_scale, zero_point, lo, hi));
}

void dequantize_u8_scalar(float* out, const uint8_t* in, int64_t n, int32_t zero_point, float scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = quant_math::dequantize_value(in[i], zero_point, scale);
}

void dequantize_s8_scalar(float* out, const int8_t* in, int64_t n, int32_t zero_point, float scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = quant_math::dequantize_value(in[i], zero_point, scale);
}

namespace {

// Elements per thread below which a loop stays serial.
constexpr int64_t kGrain = 1 << 15;

// One scale and zero point, in the forms the arithmetic uses.
struct Grid {
  float scale;
  float inv_scale;
  int32_t zero_point;
  float zero_point_f;
  float lo, hi;  // the dtype's range, as floats (quantize narrows it to its bounds)
};

Grid grid_of(const QuantParams& p, size_t channel, DType dtype) {
  float scale = quant_math::scale_as_float(p.scales[channel]);
  quant_math::QRange range = quant_math::qrange(dtype);
  auto zp = static_cast<int32_t>(p.zero_points[channel]);
  return {scale, quant_math::inverse_scale(scale), zp, static_cast<float>(zp), static_cast<float>(range.lo),
          static_cast<float>(range.hi)};
}

// Where the params change in a contiguous tensor: element L has channel
// (L / inner) % channels. Per tensor: one channel spanning everything.
struct ChannelLayout {
  int64_t channels = 1;
  int64_t inner = 1;
};

ChannelLayout layout_of(const Tensor& t) {
  const QuantParams& p = *t.impl()->quant_params();
  if (p.scheme == QuantParams::Scheme::PerTensor) return {1, t.numel()};
  int64_t inner = 1;
  for (int64_t d = p.axis + 1; d < t.dim(); ++d) inner *= t.size(d);
  return {t.size(p.axis), inner};
}

std::vector<Grid> grids_of(const Tensor& t) {
  const QuantParams& p = *t.impl()->quant_params();
  std::vector<Grid> grids;
  for (size_t c = 0; c < p.scales.size(); ++c) grids.push_back(grid_of(p, c, t.dtype()));
  return grids;
}

// The quantized float r (an integer within [lo, hi]) as T. The int32
// range's hi is 2^31 as a float, one past INT32_MAX: it saturates there
// rather than overflow the conversion.
template <class T>
T to_quantized(float r) {
  if constexpr (std::is_same_v<T, int32_t>) {
    return r >= 2147483648.0f ? INT32_MAX : static_cast<int32_t>(r);
  } else {
    return static_cast<T>(r);
  }
}

// dequantize_value, whose q - zero_point is done in int64 for qint32 (where
// int32 could overflow; the result is the same wherever it does not).
template <class T>
float dequantize_one(T q, const Grid& g) {
  if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<float>(static_cast<int64_t>(q) - g.zero_point) * g.scale;
  } else {
    return quant_math::dequantize_value(q, g.zero_point, g.scale);
  }
}

// A contiguous run of n elements on one grid, with the best loop the CPU
// allows.
template <class T>
void quantize_run(T* out, const float* in, int64_t n, const Grid& g) {
  SimdLevel level = simd_level();
  if constexpr (std::is_same_v<T, uint8_t>) {
    if (level == SimdLevel::Avx512) return quantize_u8_avx512(out, in, n, g.inv_scale, g.zero_point_f, g.lo, g.hi);
    if (level == SimdLevel::Avx2) return quantize_u8_avx2(out, in, n, g.inv_scale, g.zero_point_f, g.lo, g.hi);
    return quantize_u8_scalar(out, in, n, g.inv_scale, g.zero_point_f, g.lo, g.hi);
  } else if constexpr (std::is_same_v<T, int8_t>) {
    if (level == SimdLevel::Avx512) return quantize_s8_avx512(out, in, n, g.inv_scale, g.zero_point_f, g.lo, g.hi);
    if (level == SimdLevel::Avx2) return quantize_s8_avx2(out, in, n, g.inv_scale, g.zero_point_f, g.lo, g.hi);
    return quantize_s8_scalar(out, in, n, g.inv_scale, g.zero_point_f, g.lo, g.hi);
  } else {
    for (int64_t i = 0; i < n; ++i)
      out[i] = to_quantized<T>(quant_math::quantize_value(in[i], g.inv_scale, g.zero_point_f, g.lo, g.hi));
  }
}

template <class T>
void dequantize_run(float* out, const T* in, int64_t n, const Grid& g) {
  SimdLevel level = simd_level();
  if constexpr (std::is_same_v<T, uint8_t>) {
    if (level == SimdLevel::Avx512) return dequantize_u8_avx512(out, in, n, g.zero_point, g.scale);
    if (level == SimdLevel::Avx2) return dequantize_u8_avx2(out, in, n, g.zero_point, g.scale);
    return dequantize_u8_scalar(out, in, n, g.zero_point, g.scale);
  } else if constexpr (std::is_same_v<T, int8_t>) {
    if (level == SimdLevel::Avx512) return dequantize_s8_avx512(out, in, n, g.zero_point, g.scale);
    if (level == SimdLevel::Avx2) return dequantize_s8_avx2(out, in, n, g.zero_point, g.scale);
    return dequantize_s8_scalar(out, in, n, g.zero_point, g.scale);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = dequantize_one(in[i], g);
  }
}

// Calls fn(begin, end, grid) over contiguous element ranges of a tensor with
// `layout` and `grids` that each lie in one channel, in parallel.
template <class Fn>
void for_each_run(int64_t numel, const ChannelLayout& layout, const std::vector<Grid>& grids, const Fn& fn) {
  if (layout.channels == 1) {
    parallel_for(0, numel, kGrain, [&](int64_t b, int64_t e) { fn(b, e, grids[0]); });
    return;
  }
  int64_t rows = numel / layout.inner;  // (outer * channels) runs of `inner` elements
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / layout.inner), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) fn(r * layout.inner, (r + 1) * layout.inner, grids[r % layout.channels]);
  });
}

// Calls fn.template operator()<T>() with T the quantized dtype's C++ type.
template <class Fn>
void visit_quantized(DType dtype, std::string_view op, const Fn& fn) {
  switch (dtype) {
    case DType::UInt8: return fn.template operator()<uint8_t>();
    case DType::Int8: return fn.template operator()<int8_t>();
    case DType::Int32: return fn.template operator()<int32_t>();
    default: KILN_FAIL(op, ": ", dtype, " is not a quantized dtype (uint8, int8 or int32)");
  }
}

void check_pair(const Tensor& out, const Tensor& in, std::string_view op) {
  KILN_CHECK(out.shape() == in.shape(), op, ": output shape ", out.shape(), " differs from input shape ",
             in.shape());
  KILN_CHECK(out.device().is_cpu() && in.device().is_cpu(), op, ": CPU kernels given tensors on ", out.device(),
             " and ", in.device());
}

// out itself when contiguous, else a contiguous tensor with its dtype and
// params to compute into (written back by finish).
Tensor contiguous_target(const Tensor& out) {
  if (out.is_contiguous()) return out;
  Tensor target = Tensor::empty(out.shape(), out.dtype());
  target.impl()->set_quant_params(out.impl()->quant_params());
  return target;
}

void finish(const Tensor& out, const Tensor& target) {
  if (!target.is_same(out)) backend().copy(out, target);
}

}  // namespace

void CpuQuantizedKernels::quantize(const Tensor& out, const Tensor& in, int64_t lo, int64_t hi) {
  constexpr std::string_view op = "quantize";
  check_pair(out, in, op);
  KILN_CHECK(out.is_quantized(), op, ": the output is not a quantized tensor (", out.dtype(), ")");
  KILN_CHECK(in.dtype() == DType::Float32, op, ": expected a float32 input, got ", in.dtype());
  Tensor src = in.contiguous();
  Tensor dst = contiguous_target(out);
  ChannelLayout layout = layout_of(dst);
  std::vector<Grid> grids = grids_of(dst);
  const quant_math::QRange full = quant_math::qrange(dst.dtype());
  KILN_CHECK(full.lo <= lo && lo <= hi && hi <= full.hi, op, ": the range [", lo, ", ", hi, "] is not inside ",
             dst.dtype(), "'s [", full.lo, ", ", full.hi, "]");
  for (Grid& g : grids) {
    g.lo = static_cast<float>(lo);
    g.hi = static_cast<float>(hi);
  }
  const float* x = src.data<float>();
  visit_quantized(dst.dtype(), op, [&]<class T>() {
    T* y = static_cast<T*>(dst.data_ptr());
    for_each_run(dst.numel(), layout, grids,
                 [&](int64_t b, int64_t e, const Grid& g) { quantize_run(y + b, x + b, e - b, g); });
  });
  finish(out, dst);
}

void CpuQuantizedKernels::dequantize(const Tensor& out, const Tensor& in) {
  constexpr std::string_view op = "dequantize";
  check_pair(out, in, op);
  KILN_CHECK(in.is_quantized(), op, ": the input is not a quantized tensor (", in.dtype(), ")");
  KILN_CHECK(out.dtype() == DType::Float32, op, ": expected a float32 output, got ", out.dtype());
  Tensor src = in.contiguous();
  Tensor dst = contiguous_target(out);
  ChannelLayout layout = layout_of(src);
  std::vector<Grid> grids = grids_of(src);
  float* y = dst.data<float>();
  visit_quantized(src.dtype(), op, [&]<class T>() {
    const T* q = static_cast<const T*>(src.data_ptr());
    for_each_run(src.numel(), layout, grids,
                 [&](int64_t b, int64_t e, const Grid& g) { dequantize_run(y + b, q + b, e - b, g); });
  });
  finish(out, dst);
}

void CpuQuantizedKernels::requantize(const Tensor& out, const Tensor& in) {
  constexpr std::string_view op = "requantize";
  check_pair(out, in, op);
  KILN_CHECK(in.is_quantized() && out.is_quantized(), op, ": expected quantized tensors, got ", in.dtype(),
             (in.is_quantized() ? " (quantized)" : ""), " and ", out.dtype(),
             (out.is_quantized() ? " (quantized)" : ""));
  Tensor src = in.contiguous();
  Tensor dst = contiguous_target(out);
  ChannelLayout in_layout = layout_of(src), out_layout = layout_of(dst);
  std::vector<Grid> in_grids = grids_of(src), out_grids = grids_of(dst);
  visit_quantized(src.dtype(), op, [&]<class In>() {
    visit_quantized(dst.dtype(), op, [&]<class Out>() {
      const In* q = static_cast<const In*>(src.data_ptr());
      Out* y = static_cast<Out*>(dst.data_ptr());
      // Runs of one output channel; inside one, the input's channel is
      // looked up per element only when the input is per channel too.
      for_each_run(dst.numel(), out_layout, out_grids, [&](int64_t b, int64_t e, const Grid& go) {
        for (int64_t i = b; i < e; ++i) {
          const Grid& gi =
              in_layout.channels == 1 ? in_grids[0] : in_grids[(i / in_layout.inner) % in_layout.channels];
          float x = dequantize_one(q[i], gi);
          y[i] = to_quantized<Out>(quant_math::quantize_value(x, go.inv_scale, go.zero_point_f, go.lo, go.hi));
        }
      });
    });
  });
  finish(out, dst);
}

}  // namespace kiln::cpu
