// AVX2 + FMA float32 elementwise kernels: the 8-lane register type for the
// shared implementations in tensor/cpu/elementwise_vec.h and activation_vec.h.
#include <immintrin.h>

#include "tensor/cpu/activation_vec.h"
#include "tensor/cpu/elementwise_simd.h"
#include "tensor/cpu/elementwise_vec.h"

namespace kiln::cpu {

namespace {

struct Avx2Float {
  using Reg = __m256;
  using Mask = __m256;  // all-ones lanes where true
  static constexpr int64_t kWidth = 8;

  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg set1(float v) { return _mm256_set1_ps(v); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static Reg sqrt(Reg a) { return _mm256_sqrt_ps(a); }
  static Reg round(Reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Reg sign_bit() { return _mm256_set1_ps(-0.0f); }
  static Reg abs(Reg a) { return _mm256_andnot_ps(sign_bit(), a); }
  static Reg neg(Reg a) { return _mm256_xor_ps(sign_bit(), a); }
  static Reg minus_abs(Reg a) { return _mm256_or_ps(sign_bit(), a); }
  static Reg copysign(Reg magnitude, Reg sign) {
    return _mm256_or_ps(_mm256_andnot_ps(sign_bit(), magnitude), _mm256_and_ps(sign_bit(), sign));
  }
  static Reg max_raw(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg min_raw(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Mask is_nan(Reg a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static Mask less(Reg a, Reg b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static Mask less_equal(Reg a, Reg b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static Mask equal(Reg a, Reg b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static Reg select(Mask m, Reg if_true, Reg if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
  // p * 2^n as p * 2^(n/2) * 2^(n - n/2): each factor is a normal float for
  // n in [-150, 128], and a subnormal result is rounded only once, at the end.
  static Reg scale2(Reg p, Reg n) {
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1);
    __m256i rest = _mm256_sub_epi32(ni, half);
    __m256i bias = _mm256_set1_epi32(127);
    Reg f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    Reg f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
  }
  // p * 2^n for n in [-150, 0] and p in [0.5, 2] as (p * 2^(n + 64)) * 2^-64:
  // the first product is an exact normal float, the second rounds a
  // subnormal result once. Fewer steps than scale2, for exp of x <= 0.
  static Reg scale2_nonpositive(Reg p, Reg n) {
    __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127 + 64));
    Reg f = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f), _mm256_set1_ps(0x1p-64f));
  }
  // The biased exponent field minus 127, and the mantissa with exponent 0.
  static Reg split_exponent(Reg x, Reg& e) {
    __m256i bits = _mm256_castps_si256(x);
    __m256i biased = _mm256_srli_epi32(bits, 23);
    e = _mm256_cvtepi32_ps(_mm256_sub_epi32(biased, _mm256_set1_epi32(127)));
    __m256i mantissa = _mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff));
    return _mm256_castsi256_ps(_mm256_or_si256(mantissa, _mm256_set1_epi32(0x3f800000)));
  }
};

}  // namespace

bool binary_f32_avx2(BinaryOp op, float* out, const float* a, int64_t a_step, const float* b, int64_t b_step,
                     int64_t n) {
  return vec::binary_f32<Avx2Float>(op, out, a, a_step, b, b_step, n);
}

bool unary_f32_avx2(UnaryOp op, float* out, const float* in, int64_t n) {
  return vec::unary_f32<Avx2Float>(op, out, in, n);
}

const ActivationF32Kernels activation_f32_avx2 = vec::activation_f32_table<Avx2Float>();

}  // namespace kiln::cpu
