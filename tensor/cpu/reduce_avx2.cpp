// AVX2 float32 kernels for sums, max/min and softmax rows
// (tensor/cpu/reduce_simd.h). Compiled with -mavx2 -mfma; called only when
// simd_level() allows (Note [SIMD dispatch]).
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "tensor/cpu/reduce_simd.h"

namespace kiln::cpu {
namespace {

float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float horizontal_max(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float horizontal_min(__m256 v) {
  __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_min_ps(s, _mm_movehl_ps(s, s));
  s = _mm_min_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// max_ps/min_ps drop a NaN in their first operand, so NaNs are tracked in a
// separate unordered-compare mask and win at the end.
template <bool kMax>
float extreme(const float* x, int64_t n) {
  auto pick = [](__m256 a, __m256 b) { return kMax ? _mm256_max_ps(a, b) : _mm256_min_ps(a, b); };
  __m256 first = _mm256_set1_ps(x[0]);
  __m256 acc0 = first, acc1 = first, acc2 = first, acc3 = first;
  __m256 nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
    acc0 = pick(acc0, a);
    acc1 = pick(acc1, b);
    acc2 = pick(acc2, c);
    acc3 = pick(acc3, d);
    __m256 unordered = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q));
    nan = _mm256_or_ps(nan, unordered);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(x + i);
    acc0 = pick(acc0, a);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  __m256 acc = pick(pick(acc0, acc1), pick(acc2, acc3));
  float result = kMax ? horizontal_max(acc) : horizontal_min(acc);
  if (_mm256_movemask_ps(nan)) return std::numeric_limits<float>::quiet_NaN();
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    result = kMax ? (x[i] > result ? x[i] : result) : (x[i] < result ? x[i] : result);
  }
  return result;
}

// exp(x) for float32 lanes: Cephes' range reduction x = n*ln2 + r, a degree-5
// polynomial for e^r on |r| <= ln2/2, and 2^n built in the exponent bits.
// About 1 ulp on the normal range; below it the result flushes to 0, above
// it is inf, and NaN stays NaN.
__m256 exp256(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 lo = _mm256_set1_ps(-87.3365447505531f);
  // min/max return the second operand when one is NaN, so x goes second.
  __m256 clamped = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
  __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(clamped, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), clamped);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  result = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), result);  // underflow -> 0
  return _mm256_blendv_ps(result, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                          _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}

// Lanes [0, count) set, for the last partial vector of a row (count < 8 is
// the interesting case; larger counts set every lane).
__m256i tail_mask(int64_t count) {
  __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 8 ? count : 8)), lane);
}

}  // namespace

float sum_f32_avx2(const float* x, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(x + i));
    acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(x + i + 8));
    acc2 = _mm256_add_ps(acc2, _mm256_loadu_ps(x + i + 16));
    acc3 = _mm256_add_ps(acc3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(x + i));
  float sum = horizontal_sum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i];
  return sum + tail;
}

float max_f32_avx2(const float* x, int64_t n) { return extreme<true>(x, n); }
float min_f32_avx2(const float* x, int64_t n) { return extreme<false>(x, n); }

void exp_f32_avx2(float* out, const float* in, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp256(_mm256_loadu_ps(in + i)));
  for (; i < n; ++i) out[i] = std::exp(in[i]);
}

void softmax_row_f32_avx2(float* out, const float* in, int64_t n, bool log) {
  // Pass 1: the row max (a NaN need not win here: it reaches every output
  // through the sum below).
  float max = in[0];
  int64_t i = 0;
  if (n >= 8) {
    __m256 m = _mm256_loadu_ps(in);
    for (i = 8; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(in + i));
    max = horizontal_max(m);
  }
  for (; i < n; ++i) max = in[i] > max ? in[i] : max;

  // Pass 2: sum of exp(x - max); softmax keeps the exponentials in out. The
  // last partial vector is masked, so short rows (n = 10) stay vectorised.
  __m256 vmax = _mm256_set1_ps(max);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    __m256 e0 = exp256(_mm256_sub_ps(_mm256_loadu_ps(in + i), vmax));
    __m256 e1 = exp256(_mm256_sub_ps(_mm256_loadu_ps(in + i + 8), vmax));
    if (!log) {
      _mm256_storeu_ps(out + i, e0);
      _mm256_storeu_ps(out + i + 8, e1);
    }
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
  }
  for (; i < n; i += 8) {
    __m256i mask = tail_mask(n - i);
    __m256 e = exp256(_mm256_sub_ps(_mm256_maskload_ps(in + i, mask), vmax));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));  // lanes past the end add 0
    if (!log) _mm256_maskstore_ps(out + i, mask, e);
    acc0 = _mm256_add_ps(acc0, e);
  }
  float sum = horizontal_sum(_mm256_add_ps(acc0, acc1));

  // Pass 3: scale, or subtract the log of the sum.
  if (log) {
    float log_sum = std::log(sum);
    __m256 vlog = _mm256_set1_ps(log_sum);
    for (i = 0; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(out + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(in + i), vmax), vlog));
    }
    for (; i < n; ++i) out[i] = (in[i] - max) - log_sum;
    return;
  }
  float inv_sum = 1.0f / sum;
  __m256 inv = _mm256_set1_ps(inv_sum);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(out + i), inv));
  for (; i < n; ++i) out[i] *= inv_sum;
}

}  // namespace kiln::cpu
