// AVX2 versions of the contiguous per-tensor quantize and dequantize loops
// (quantize_simd.h). Compiled with -mavx2 and -ffp-contract=off, so the
// multiply and the add below stay two roundings, as in quant_math.h.
#include <immintrin.h>

#include "tensor/cpu/quantize_simd.h"

namespace kiln::cpu {
namespace {

// clamp(nearbyint(x * inv_scale) + zero_point, lo, hi) on 8 floats, as int32.
// max(r, lo) with r first returns lo for a NaN r, as fmaxf(NaN, lo) does.
inline __m256i quantize8(__m256 x, __m256 inv_scale, __m256 zero_point, __m256 lo, __m256 hi) {
  __m256 r = _mm256_round_ps(_mm256_mul_ps(x, inv_scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_add_ps(r, zero_point);
  r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
  return _mm256_cvtps_epi32(r);
}

// 32 quantized values (each already in the 8-bit range) as 32 bytes, in
// order: the packs interleave the 128-bit lanes, the permute undoes it.
template <bool kSigned>
inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
  __m256i ab = _mm256_packs_epi32(a, b);
  __m256i cd = _mm256_packs_epi32(c, d);
  __m256i bytes = kSigned ? _mm256_packs_epi16(ab, cd) : _mm256_packus_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <bool kSigned, class T>
void quantize_loop(T* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo, float hi) {
  const __m256 vinv = _mm256_set1_ps(inv_scale), vzp = _mm256_set1_ps(zero_point);
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = quantize8(_mm256_loadu_ps(in + i), vinv, vzp, vlo, vhi);
    __m256i b = quantize8(_mm256_loadu_ps(in + i + 8), vinv, vzp, vlo, vhi);
    __m256i c = quantize8(_mm256_loadu_ps(in + i + 16), vinv, vzp, vlo, vhi);
    __m256i d = quantize8(_mm256_loadu_ps(in + i + 24), vinv, vzp, vlo, vhi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), pack32<kSigned>(a, b, c, d));
  }
  if (i < n) {
    if constexpr (kSigned) {
      quantize_s8_scalar(out + i, in + i, n - i, inv_scale, zero_point, lo, hi);
    } else {
      quantize_u8_scalar(out + i, in + i, n - i, inv_scale, zero_point, lo, hi);
    }
  }
}

// float(q - zero_point) * scale on 8 values widened to int32.
inline __m256 dequantize8(__m256i q, __m256i zero_point, __m256 scale) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, zero_point)), scale);
}

template <bool kSigned, class T>
void dequantize_loop(float* out, const T* in, int64_t n, int32_t zero_point, float scale) {
  const __m256i vzp = _mm256_set1_epi32(zero_point);
  const __m256 vscale = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    __m256i lo = kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
    __m128i high_half = _mm_srli_si128(bytes, 8);
    __m256i hi = kSigned ? _mm256_cvtepi8_epi32(high_half) : _mm256_cvtepu8_epi32(high_half);
    _mm256_storeu_ps(out + i, dequantize8(lo, vzp, vscale));
    _mm256_storeu_ps(out + i + 8, dequantize8(hi, vzp, vscale));
  }
  if (i < n) {
    if constexpr (kSigned) {
      dequantize_s8_scalar(out + i, in + i, n - i, zero_point, scale);
    } else {
      dequantize_u8_scalar(out + i, in + i, n - i, zero_point, scale);
    }
  }
}

}  // namespace

void quantize_u8_avx2(uint8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                      float hi) {
  quantize_loop<false>(out, in, n, inv_scale, zero_point, lo, hi);
}

void quantize_s8_avx2(int8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                      float hi) {
  quantize_loop<true>(out, in, n, inv_scale, zero_point, lo, hi);
}

void dequantize_u8_avx2(float* out, const uint8_t* in, int64_t n, int32_t zero_point, float scale) {
  dequantize_loop<false>(out, in, n, zero_point, scale);
}

void dequantize_s8_avx2(float* out, const int8_t* in, int64_t n, int32_t zero_point, float scale) {
  dequantize_loop<true>(out, in, n, zero_point, scale);
}

}  // namespace kiln::cpu
