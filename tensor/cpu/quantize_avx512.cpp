// AVX-512 versions of the contiguous per-tensor quantize and dequantize
// loops (quantize_simd.h); the tail of fewer than 16 elements is done with
// masked loads and stores. Compiled with -ffp-contract=off, as quant_math.h
// requires.
#include <immintrin.h>

#include "tensor/cpu/quantize_simd.h"

namespace kiln::cpu {
namespace {

// clamp(nearbyint(x * inv_scale) + zero_point, lo, hi) on 16 floats, as
// int32; max(r, lo) with r first gives lo for a NaN r, as fmaxf does.
inline __m512i quantize16(__m512 x, __m512 inv_scale, __m512 zero_point, __m512 lo, __m512 hi) {
  __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(x, inv_scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_add_ps(r, zero_point);
  r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
  return _mm512_cvtps_epi32(r);
}

// The int32 values are within the 8-bit range already, so the saturating
// narrowings only drop the high bytes.
template <bool kSigned>
inline __m128i narrow16(__m512i q) {
  return kSigned ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(q);
}

template <bool kSigned, class T>
void quantize_loop(T* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo, float hi) {
  const __m512 vinv = _mm512_set1_ps(inv_scale), vzp = _mm512_set1_ps(zero_point);
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i q = quantize16(_mm512_loadu_ps(in + i), vinv, vzp, vlo, vhi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), narrow16<kSigned>(q));
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i q = quantize16(_mm512_maskz_loadu_ps(mask, in + i), vinv, vzp, vlo, vhi);
    _mm_mask_storeu_epi8(out + i, mask, narrow16<kSigned>(q));
  }
}

inline __m512 dequantize16(__m512i q, __m512i zero_point, __m512 scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, zero_point)), scale);
}

template <bool kSigned>
inline __m512i widen16(__m128i bytes) {
  return kSigned ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
}

template <bool kSigned, class T>
void dequantize_loop(float* out, const T* in, int64_t n, int32_t zero_point, float scale) {
  const __m512i vzp = _mm512_set1_epi32(zero_point);
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm512_storeu_ps(out + i, dequantize16(widen16<kSigned>(bytes), vzp, vscale));
  }
  if (i < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m128i bytes = _mm_maskz_loadu_epi8(mask, in + i);
    _mm512_mask_storeu_ps(out + i, mask, dequantize16(widen16<kSigned>(bytes), vzp, vscale));
  }
}

}  // namespace

void quantize_u8_avx512(uint8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi) {
  quantize_loop<false>(out, in, n, inv_scale, zero_point, lo, hi);
}

void quantize_s8_avx512(int8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi) {
  quantize_loop<true>(out, in, n, inv_scale, zero_point, lo, hi);
}

void dequantize_u8_avx512(float* out, const uint8_t* in, int64_t n, int32_t zero_point, float scale) {
  dequantize_loop<false>(out, in, n, zero_point, scale);
}

void dequantize_s8_avx512(float* out, const int8_t* in, int64_t n, int32_t zero_point, float scale) {
  dequantize_loop<true>(out, in, n, zero_point, scale);
}

}  // namespace kiln::cpu
