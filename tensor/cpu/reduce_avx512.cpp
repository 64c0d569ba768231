// AVX-512 float32 kernels for sums, max/min and softmax rows
// (tensor/cpu/reduce_simd.h): the AVX2 versions at 16 lanes, with mask
// registers for the NaN and range checks. Called only when simd_level()
// allows (Note [SIMD dispatch]).

// GCC 12's AVX-512 headers trip -Wuninitialized inside their own reduce and
// mask intrinsics (GCC bug 105593, fixed in GCC 13); the warning is about the
// header's placeholder operand, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cmath>
#include <limits>

#include "tensor/cpu/reduce_simd.h"

namespace kiln::cpu {
namespace {

// max_ps/min_ps drop a NaN in their first operand, so NaNs are tracked in a
// mask and win at the end.
template <bool kMax>
float extreme(const float* x, int64_t n) {
  auto pick = [](__m512 a, __m512 b) { return kMax ? _mm512_max_ps(a, b) : _mm512_min_ps(a, b); };
  __m512 first = _mm512_set1_ps(x[0]);
  __m512 acc0 = first, acc1 = first, acc2 = first, acc3 = first;
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    __m512 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
    acc0 = pick(acc0, a);
    acc1 = pick(acc1, b);
    acc2 = pick(acc2, c);
    acc3 = pick(acc3, d);
    nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_loadu_ps(x + i);
    acc0 = pick(acc0, a);
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  }
  __m512 acc = pick(pick(acc0, acc1), pick(acc2, acc3));
  float result = kMax ? _mm512_reduce_max_ps(acc) : _mm512_reduce_min_ps(acc);
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    result = kMax ? (x[i] > result ? x[i] : result) : (x[i] < result ? x[i] : result);
  }
  return result;
}

// exp(x) for 16 float32 lanes; the same range reduction and polynomial as
// exp256 in tensor/cpu/reduce_avx2.cpp.
__m512 exp512(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.3762626647949f);
  const __m512 lo = _mm512_set1_ps(-87.3365447505531f);
  __m512 clamped = _mm512_max_ps(lo, _mm512_min_ps(hi, x));  // x second: NaN survives
  __m512 n = _mm512_roundscale_ps(
      _mm512_fmadd_ps(clamped, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), clamped);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  __m512 result = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  result = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ),
                            _mm512_set1_ps(std::numeric_limits<float>::infinity()));
}

}  // namespace

float sum_f32_avx512(const float* x, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_add_ps(acc0, _mm512_loadu_ps(x + i));
    acc1 = _mm512_add_ps(acc1, _mm512_loadu_ps(x + i + 16));
    acc2 = _mm512_add_ps(acc2, _mm512_loadu_ps(x + i + 32));
    acc3 = _mm512_add_ps(acc3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_add_ps(acc0, _mm512_loadu_ps(x + i));
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i];
  return sum + tail;
}

float max_f32_avx512(const float* x, int64_t n) { return extreme<true>(x, n); }
float min_f32_avx512(const float* x, int64_t n) { return extreme<false>(x, n); }

void exp_f32_avx512(float* out, const float* in, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, exp512(_mm512_loadu_ps(in + i)));
  for (; i < n; ++i) out[i] = std::exp(in[i]);
}

void softmax_row_f32_avx512(float* out, const float* in, int64_t n, bool log) {
  // Pass 1: the row max (a NaN reaches every output through the sum anyway).
  float max = in[0];
  int64_t i = 0;
  if (n >= 16) {
    __m512 m = _mm512_loadu_ps(in);
    for (i = 16; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(in + i));
    max = _mm512_reduce_max_ps(m);
  }
  for (; i < n; ++i) max = in[i] > max ? in[i] : max;

  // Pass 2: sum of exp(x - max); softmax keeps the exponentials in out.
  __m512 vmax = _mm512_set1_ps(max);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (i = 0; i + 32 <= n; i += 32) {
    __m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(in + i), vmax));
    __m512 e1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(in + i + 16), vmax));
    if (!log) {
      _mm512_storeu_ps(out + i, e0);
      _mm512_storeu_ps(out + i + 16, e1);
    }
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
  }
  for (; i < n; i += 16) {
    // The last partial vector is masked, so short rows stay vectorised.
    __mmask16 mask = n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, in + i), vmax));
    e = _mm512_maskz_mov_ps(mask, e);  // lanes past the end add 0
    if (!log) _mm512_mask_storeu_ps(out + i, mask, e);
    acc0 = _mm512_add_ps(acc0, e);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));

  // Pass 3: scale, or subtract the log of the sum.
  if (log) {
    float log_sum = std::log(sum);
    __m512 vlog = _mm512_set1_ps(log_sum);
    for (i = 0; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(out + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(in + i), vmax), vlog));
    }
    for (; i < n; ++i) out[i] = (in[i] - max) - log_sum;
    return;
  }
  float inv_sum = 1.0f / sum;
  __m512 inv = _mm512_set1_ps(inv_sum);
  for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(out + i), inv));
  for (; i < n; ++i) out[i] *= inv_sum;
}

}  // namespace kiln::cpu
