// AVX-512 float32 kernels for sums, max/min and softmax rows
// (tensor/cpu/reduce_simd.h): the 16-lane register type for the shared
// implementation in tensor/cpu/reduce_vec.h, with mask registers for the NaN
// and range checks. Called only when simd_level() allows
// (Note [SIMD dispatch]).

// GCC 12's AVX-512 headers trip -Wuninitialized inside their own reduce and
// mask intrinsics (GCC bug 105593, fixed in GCC 13); the warning is about the
// header's placeholder operand, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "tensor/cpu/reduce_simd.h"
#include "tensor/cpu/reduce_vec.h"

namespace kiln::cpu {
namespace {

struct Avx512Float {
  using Reg = __m512;
  using Mask = __mmask16;
  using Tail = __mmask16;
  static constexpr int64_t kWidth = 16;

  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg set1(float v) { return _mm512_set1_ps(v); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static Reg floor(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static Reg max_raw(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg min_raw(Reg a, Reg b) { return _mm512_min_ps(a, b); }

  static float reduce_add(Reg v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(Reg v) { return _mm512_reduce_max_ps(v); }
  static float reduce_min(Reg v) { return _mm512_reduce_min_ps(v); }

  static Mask unordered(Reg a, Reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
  static Mask less(Reg a, Reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static Mask greater(Reg a, Reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static Mask mask_or(Mask a, Mask b) { return a | b; }
  static Mask no_lanes() { return 0; }
  static bool any(Mask m) { return m != 0; }
  static Reg zero_where(Mask m, Reg v) { return _mm512_mask_mov_ps(v, m, _mm512_setzero_ps()); }
  static Reg select(Mask m, Reg if_true, Reg if_false) { return _mm512_mask_mov_ps(if_false, m, if_true); }

  static Reg pow2(Reg n) {
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(bits);
  }

  static Tail tail_mask(int64_t count) {
    return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1);
  }
  static Reg load_tail(const float* p, Tail t) { return _mm512_maskz_loadu_ps(t, p); }
  static void store_tail(float* p, Tail t, Reg v) { _mm512_mask_storeu_ps(p, t, v); }
  static Reg zero_outside(Tail t, Reg v) { return _mm512_maskz_mov_ps(t, v); }
};

}  // namespace

float sum_f32_avx512(const float* x, int64_t n) { return vec::sum_f32<Avx512Float>(x, n); }
float max_f32_avx512(const float* x, int64_t n) { return vec::extreme_f32<Avx512Float, true>(x, n); }
float min_f32_avx512(const float* x, int64_t n) { return vec::extreme_f32<Avx512Float, false>(x, n); }

void exp_f32_avx512(float* out, const float* in, int64_t n) { vec::exp_f32<Avx512Float>(out, in, n); }

void softmax_row_f32_avx512(float* out, const float* in, int64_t n, bool log) {
  vec::softmax_row_f32<Avx512Float>(out, in, n, log);
}

}  // namespace kiln::cpu
