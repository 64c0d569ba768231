// AVX-512 quantized add (quantized_binary_simd.h): the AVX2 loop's sequence
// on 16 lanes, compiled with AVX-512 and -ffp-contract=off so the multiplies
// and adds stay separate roundings.
// GCC 12's AVX-512 intrinsics warn about their own "undefined" registers
// (GCC bug 105593), as in qgemm_amx.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "tensor/cpu/quantized_binary_simd.h"

namespace kiln::cpu {
namespace {

template <bool kSigned>
inline __m512i widen16(const void* p) {
  __m128i bytes = _mm_loadu_si128(static_cast<const __m128i*>(p));
  return kSigned ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
}

template <bool kSigned, class T>
void add_loop(T* out, const T* a, const T* b, int64_t n, const QuantizedAddGrids& g) {
  const AddLanesZmm v(g);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i q = add_lanes(widen16<kSigned>(a + i), widen16<kSigned>(b + i), v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(q));
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

void quantized_add_u8_avx512(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, const QuantizedAddGrids& g) {
  add_loop<false>(out, a, b, n, g);
}

void quantized_add_s8_avx512(int8_t* out, const int8_t* a, const int8_t* b, int64_t n, const QuantizedAddGrids& g) {
  add_loop<true>(out, a, b, n, g);
}

}  // namespace kiln::cpu
