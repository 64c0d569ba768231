// AVX2 quantized add (quantized_binary_simd.h), compiled with -mavx2 and
// -ffp-contract=off so the multiplies and adds stay separate roundings.
#include <immintrin.h>

#include "tensor/cpu/quantized_binary_simd.h"

namespace kiln::cpu {
namespace {

template <bool kSigned>
inline __m256i widen8(const void* p) {
  __m128i bytes = _mm_loadl_epi64(static_cast<const __m128i*>(p));
  return kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
}

template <bool kSigned, class T>
void add_loop(T* out, const T* a, const T* b, int64_t n, const QuantizedAddGrids& g) {
  const AddLanesYmm v(g);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (int j = 0; j < 4; ++j) q[j] = add_lanes(widen8<kSigned>(a + i + 8 * j), widen8<kSigned>(b + i + 8 * j), v);
    __m256i lo = _mm256_packs_epi32(q[0], q[1]), hi = _mm256_packs_epi32(q[2], q[3]);
    __m256i bytes = kSigned ? _mm256_packs_epi16(lo, hi) : _mm256_packus_epi16(lo, hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(bytes, order));
  }
  if (i < n) {
    if constexpr (kSigned) {
      quantized_add_s8_scalar(out + i, a + i, b + i, n - i, g);
    } else {
      quantized_add_u8_scalar(out + i, a + i, b + i, n - i, g);
    }
  }
}

}  // namespace

void quantized_add_u8_avx2(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, const QuantizedAddGrids& g) {
  add_loop<false>(out, a, b, n, g);
}

void quantized_add_s8_avx2(int8_t* out, const int8_t* a, const int8_t* b, int64_t n, const QuantizedAddGrids& g) {
  add_loop<true>(out, a, b, n, g);
}

}  // namespace kiln::cpu
