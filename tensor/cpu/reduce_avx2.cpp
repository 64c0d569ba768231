// AVX2 float32 kernels for sums, max/min and softmax rows
// (tensor/cpu/reduce_simd.h): the 8-lane register type for the shared
// implementation in tensor/cpu/reduce_vec.h. Compiled with -mavx2 -mfma;
// called only when simd_level() allows (Note [SIMD dispatch]).
#include <immintrin.h>

#include "tensor/cpu/reduce_simd.h"
#include "tensor/cpu/reduce_vec.h"

namespace kiln::cpu {
namespace {

struct Avx2Float {
  using Reg = __m256;
  using Mask = __m256;  // all-ones lanes where true
  using Tail = __m256i;
  static constexpr int64_t kWidth = 8;

  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg set1(float v) { return _mm256_set1_ps(v); }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg fnmadd(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static Reg floor(Reg a) { return _mm256_floor_ps(a); }
  static Reg max_raw(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg min_raw(Reg a, Reg b) { return _mm256_min_ps(a, b); }

  // Horizontal folds: the two 128-bit halves, then within a half.
  static float reduce_add(Reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(Reg v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_min(Reg v) {
    __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_min_ps(s, _mm_movehl_ps(s, s));
    s = _mm_min_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  static Mask unordered(Reg a, Reg b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
  static Mask less(Reg a, Reg b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static Mask greater(Reg a, Reg b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static Mask mask_or(Mask a, Mask b) { return _mm256_or_ps(a, b); }
  static Mask no_lanes() { return _mm256_setzero_ps(); }
  static bool any(Mask m) { return _mm256_movemask_ps(m) != 0; }
  static Reg zero_where(Mask m, Reg v) { return _mm256_andnot_ps(m, v); }
  static Reg select(Mask m, Reg if_true, Reg if_false) { return _mm256_blendv_ps(if_false, if_true, m); }

  static Reg pow2(Reg n) {
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(bits);
  }

  // Lanes [0, count) set, for the last partial vector of a row (count < 8 is
  // the interesting case; larger counts set every lane).
  static Tail tail_mask(int64_t count) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 8 ? count : 8)), lane);
  }
  static Reg load_tail(const float* p, Tail t) { return _mm256_maskload_ps(p, t); }
  static void store_tail(float* p, Tail t, Reg v) { _mm256_maskstore_ps(p, t, v); }
  static Reg zero_outside(Tail t, Reg v) { return _mm256_and_ps(v, _mm256_castsi256_ps(t)); }
};

}  // namespace

float sum_f32_avx2(const float* x, int64_t n) { return vec::sum_f32<Avx2Float>(x, n); }
float max_f32_avx2(const float* x, int64_t n) { return vec::extreme_f32<Avx2Float, true>(x, n); }
float min_f32_avx2(const float* x, int64_t n) { return vec::extreme_f32<Avx2Float, false>(x, n); }

void exp_f32_avx2(float* out, const float* in, int64_t n) { vec::exp_f32<Avx2Float>(out, in, n); }

void softmax_row_f32_avx2(float* out, const float* in, int64_t n, bool log) {
  vec::softmax_row_f32<Avx2Float>(out, in, n, log);
}

}  // namespace kiln::cpu
