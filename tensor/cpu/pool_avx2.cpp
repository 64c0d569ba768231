// 2x2 / stride-2 max pooling values with AVX2 (see pool_avx2.h).
//
// A plane whose rows are exactly 2*ow wide is, read linearly, a run of
// horizontal pairs: pair i is elements 2i and 2i+1, and pairs i and
// i + ow sit in the two rows of one window. So the kernel makes two linear
// passes, each a vector loop:
//   hbuf[i]     = pick(plane[2i], plane[2i + 1])          for i < 2*oh*ow
//   out[oy][ox] = pick(hbuf[2*oy*ow + ox], hbuf[(2*oy + 1)*ow + ox])
// with pick(m, v) = v when v > m or v is NaN, else m: the update of the
// general path (tensor/cpu/pool.cpp). Taking each row's pair first and the
// rows second gives that path's sequential result over the taps in
// row-major order: the first of equal maxima (so -0 and +0 keep their
// order) and the last NaN.
#include "tensor/cpu/pool_avx2.h"

#include <immintrin.h>

namespace kiln::cpu {

namespace {

// v where v > m or v is NaN, else m (lane-wise).
inline __m256 pick(__m256 m, __m256 v) {
  const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_ps(m, v, take);
}

inline float pick(float m, float v) { return (v > m) | (v != v) ? v : m; }

// Lanes 0 .. n-1 set, n in 0..8.
inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// hbuf[i] = pick(x[2i], x[2i + 1]) for i < n.
void horizontal_pairs(const float* x, float* hbuf, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 lo = _mm256_loadu_ps(x + 2 * i), hi = _mm256_loadu_ps(x + 2 * i + 8);
    // Within each 128-bit half: evens (lo0 lo2 hi0 hi2), odds (lo1 lo3 hi1 hi3);
    // the 64-bit permute puts lo's pairs before hi's.
    const __m256 even = _mm256_shuffle_ps(lo, hi, 0x88), odd = _mm256_shuffle_ps(lo, hi, 0xDD);
    const __m256 m = pick(even, odd);
    _mm256_storeu_ps(hbuf + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), 0xD8)));
  }
  for (; i < n; ++i) hbuf[i] = pick(x[2 * i], x[2 * i + 1]);
}

// out[j] = pick(top[j], bottom[j]) for j < n.
void vertical_pairs(const float* top, const float* bottom, float* out, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, pick(_mm256_loadu_ps(top + j), _mm256_loadu_ps(bottom + j)));
  if (j < n) {
    const __m256i mask = first_lanes(n - j);
    const __m256 m = pick(_mm256_maskload_ps(top + j, mask), _mm256_maskload_ps(bottom + j, mask));
    _mm256_maskstore_ps(out + j, mask, m);
  }
}

}  // namespace

void max_pool_2x2_values_avx2(const float* plane, float* out, float* hbuf, int64_t out_h, int64_t out_w) {
  horizontal_pairs(plane, hbuf, 2 * out_h * out_w);
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const float* top = hbuf + 2 * oy * out_w;
    vertical_pairs(top, top + out_w, out + oy * out_w, out_w);
  }
}

}  // namespace kiln::cpu
