// CPU quantized add (CpuQuantizedKernels::add): out = a + b on out's grid,
// quant_math::add_value per element, relu folded in as lo = max(lo,
// zero_point_out). Contiguous 8-bit tensors go through the loops of
// quantized_binary_simd.h; qint32 and strided tensors through copies and
// the scalar arithmetic.
#include <algorithm>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/quantized_binary_simd.h"
#include "tensor/quant_math.h"

namespace kiln::cpu {

namespace {

template <class T>
void add_scalar(T* out, const T* a, const T* b, int64_t n, const QuantizedAddGrids& g) {
  for (int64_t i = 0; i < n; ++i) {
    int32_t q = quant_math::add_value(a[i], g.zero_point_a, g.scale_a, b[i], g.zero_point_b, g.scale_b,
                                      g.inv_scale_out, g.zero_point_out, g.lo, g.hi);
    out[i] = static_cast<T>(q);
  }
}

}  // namespace

void quantized_add_u8_scalar(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, const QuantizedAddGrids& g) {
  add_scalar(out, a, b, n, g);
}

void quantized_add_s8_scalar(int8_t* out, const int8_t* a, const int8_t* b, int64_t n, const QuantizedAddGrids& g) {
  add_scalar(out, a, b, n, g);
}

namespace {

constexpr int64_t kGrain = 1 << 15;

const QuantParams& per_tensor(const Tensor& t, std::string_view what) {
  KILN_CHECK(t.is_quantized(), "quantized add: ", what, " is not a quantized tensor (", t.dtype(), ")");
  const QuantParams& p = *t.impl()->quant_params();
  KILN_CHECK(p.scheme == QuantParams::Scheme::PerTensor, "quantized add: ", what,
             " is quantized per channel; the add takes per-tensor quantized tensors");
  return p;
}

template <class T>
void add_run(T* out, const T* a, const T* b, int64_t n, const QuantizedAddGrids& g) {
  if constexpr (std::is_same_v<T, int32_t>) {
    // The scalar arithmetic on qint32: the float result is clamped to
    // [lo, 2^31] and saturates at INT32_MAX rather than overflow.
    for (int64_t i = 0; i < n; ++i) {
      float sum = static_cast<float>(static_cast<int64_t>(a[i]) - g.zero_point_a) * g.scale_a +
                  static_cast<float>(static_cast<int64_t>(b[i]) - g.zero_point_b) * g.scale_b;
      float r = quant_math::quantize_value(sum, g.inv_scale_out, g.zero_point_out, g.lo, g.hi);
      out[i] = r >= 2147483648.0f ? INT32_MAX : static_cast<int32_t>(r);
    }
  } else if (simd_level() == SimdLevel::Avx512) {
    if constexpr (std::is_same_v<T, uint8_t>) quantized_add_u8_avx512(out, a, b, n, g);
    else quantized_add_s8_avx512(out, a, b, n, g);
  } else if (simd_level() == SimdLevel::Avx2) {
    if constexpr (std::is_same_v<T, uint8_t>) quantized_add_u8_avx2(out, a, b, n, g);
    else quantized_add_s8_avx2(out, a, b, n, g);
  } else {
    add_scalar(out, a, b, n, g);
  }
}

}  // namespace

void CpuQuantizedKernels::add(const Tensor& out, const Tensor& a, const Tensor& b, bool relu) {
  const QuantParams& pa = per_tensor(a, "a");
  const QuantParams& pb = per_tensor(b, "b");
  const QuantParams& po = per_tensor(out, "the output");
  KILN_CHECK(a.shape() == b.shape() && a.shape() == out.shape(), "quantized add: shapes ", a.shape(), ", ", b.shape(),
             " and output ", out.shape(), " differ");
  KILN_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "quantized add: dtypes ", a.dtype(), ", ", b.dtype(),
             " and output ", out.dtype(), " differ");
  quant_math::QRange range = quant_math::qrange(out.dtype());
  float scale_out = quant_math::scale_as_float(po.scales[0]);
  auto zp_out = static_cast<int32_t>(po.zero_points[0]);
  QuantizedAddGrids g{static_cast<int32_t>(pa.zero_points[0]),
                      quant_math::scale_as_float(pa.scales[0]),
                      static_cast<int32_t>(pb.zero_points[0]),
                      quant_math::scale_as_float(pb.scales[0]),
                      quant_math::inverse_scale(scale_out),
                      static_cast<float>(zp_out),
                      static_cast<float>(relu ? std::max(range.lo, zp_out) : range.lo),
                      static_cast<float>(range.hi)};
  Tensor ca = a.contiguous(), cb = b.contiguous();
  Tensor dst = out;
  if (!out.is_contiguous()) {
    dst = Tensor::empty(out.shape(), out.dtype());
    dst.impl()->set_quant_params(out.impl()->quant_params());
  }
  auto run = [&]<class T>() {
    const T* pa_data = static_cast<const T*>(ca.data_ptr());
    const T* pb_data = static_cast<const T*>(cb.data_ptr());
    T* po_data = static_cast<T*>(dst.data_ptr());
    parallel_for(0, dst.numel(), kGrain, [&](int64_t begin, int64_t end) {
      add_run(po_data + begin, pa_data + begin, pb_data + begin, end - begin, g);
    });
  };
  switch (out.dtype()) {
    case DType::UInt8: run.template operator()<uint8_t>(); break;
    case DType::Int8: run.template operator()<int8_t>(); break;
    case DType::Int32: run.template operator()<int32_t>(); break;
    default: KILN_FAIL("quantized add: ", out.dtype(), " is not a quantized dtype");
  }
  if (!dst.is_same(out)) backend().copy(out, dst);
}

}  // namespace kiln::cpu
