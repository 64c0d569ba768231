// AVX2/FMA builds of the float32 norm row sums (tensor/cpu/norm_simd.h).
// Compiled with -mavx2 -mfma; called only when simd_level() allows (Note
// [SIMD dispatch]).
#include "tensor/cpu/norm_simd.h"

namespace kiln::cpu {

NormSums shifted_sums_f32_avx2(const float* x, int64_t n, float shift) { return shifted_sums_impl(x, n, shift); }

NormSums grad_sums_f32_avx2(const float* dy, const float* x, const float* w, int64_t n, float mean) {
  return grad_sums_impl(dy, x, w, n, mean);
}

}  // namespace kiln::cpu
