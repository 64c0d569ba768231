// AVX-512 float32 elementwise kernels: the 16-lane register type for the
// shared implementations in tensor/cpu/elementwise_vec.h and activation_vec.h.
// Same operations as elementwise_avx2.cpp; comparisons give mask registers
// instead of lanes.
// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined"
// register and so warn (GCC bug 105593, fixed in 12.3); the warning is about
// the compiler's header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "tensor/cpu/activation_vec.h"
#include "tensor/cpu/elementwise_simd.h"
#include "tensor/cpu/elementwise_vec.h"

namespace kiln::cpu {

namespace {

struct Avx512Float {
  using Reg = __m512;
  using Mask = __mmask16;
  static constexpr int64_t kWidth = 16;

  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg set1(float v) { return _mm512_set1_ps(v); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static Reg sqrt(Reg a) { return _mm512_sqrt_ps(a); }
  static Reg round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static __m512i sign_bit() { return _mm512_set1_epi32(static_cast<int>(0x80000000u)); }
  static Reg abs(Reg a) { return _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit(), _mm512_castps_si512(a))); }
  static Reg neg(Reg a) { return _mm512_castsi512_ps(_mm512_xor_si512(sign_bit(), _mm512_castps_si512(a))); }
  static Reg minus_abs(Reg a) { return _mm512_castsi512_ps(_mm512_or_si512(sign_bit(), _mm512_castps_si512(a))); }
  static Reg copysign(Reg magnitude, Reg sign) {
    __m512i m = _mm512_andnot_si512(sign_bit(), _mm512_castps_si512(magnitude));
    __m512i s = _mm512_and_si512(sign_bit(), _mm512_castps_si512(sign));
    return _mm512_castsi512_ps(_mm512_or_si512(m, s));
  }
  static Reg max_raw(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg min_raw(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Mask is_nan(Reg a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static Mask less(Reg a, Reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static Mask less_equal(Reg a, Reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  static Mask equal(Reg a, Reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static Reg select(Mask m, Reg if_true, Reg if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
  // See Avx2Float::scale2.
  static Reg scale2(Reg p, Reg n) {
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i half = _mm512_srai_epi32(ni, 1);
    __m512i rest = _mm512_sub_epi32(ni, half);
    __m512i bias = _mm512_set1_epi32(127);
    Reg f1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23));
    Reg f2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(rest, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, f1), f2);
  }
  // See Avx2Float::scale2_nonpositive.
  static Reg scale2_nonpositive(Reg p, Reg n) {
    __m512i biased = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127 + 64));
    Reg f = _mm512_castsi512_ps(_mm512_slli_epi32(biased, 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, f), _mm512_set1_ps(0x1p-64f));
  }
  // See Avx2Float::split_exponent.
  static Reg split_exponent(Reg x, Reg& e) {
    __m512i bits = _mm512_castps_si512(x);
    __m512i biased = _mm512_srli_epi32(bits, 23);
    e = _mm512_cvtepi32_ps(_mm512_sub_epi32(biased, _mm512_set1_epi32(127)));
    __m512i mantissa = _mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff));
    return _mm512_castsi512_ps(_mm512_or_si512(mantissa, _mm512_set1_epi32(0x3f800000)));
  }
};

}  // namespace

bool binary_f32_avx512(BinaryOp op, float* out, const float* a, int64_t a_step, const float* b, int64_t b_step,
                       int64_t n) {
  return vec::binary_f32<Avx512Float>(op, out, a, a_step, b, b_step, n);
}

bool unary_f32_avx512(UnaryOp op, float* out, const float* in, int64_t n) {
  return vec::unary_f32<Avx512Float>(op, out, in, n);
}

const ActivationF32Kernels activation_f32_avx512 = vec::activation_f32_table<Avx512Float>();

}  // namespace kiln::cpu
