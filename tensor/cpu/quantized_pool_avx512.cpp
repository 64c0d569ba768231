// Output rows of the 2x2 / stride 2 int8 max pool (quantized_pool.cpp)
// with AVX-512BW: 32 outputs from 64 bytes of each input row. The vertical
// max is one byte max; the horizontal one takes each byte pair's max in the
// low byte of its 16-bit lane (the pair's high byte shifted down beside it),
// which the narrowing store keeps.
// GCC 12's AVX-512 intrinsics warn about their own "undefined" registers
// (GCC bug 105593), as in qgemm_amx.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "tensor/cpu/quantized_pool_simd.h"

namespace kiln::cpu {
namespace {

template <bool kSigned>
inline __m512i max8(__m512i a, __m512i b) {
  return kSigned ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
}

template <bool kSigned>
void max_2x2_row(uint8_t* dst, const uint8_t* r0, const uint8_t* r1, int64_t ow) {
  for (int64_t ox = 0; ox < ow; ox += 32) {
    const int64_t outputs = ow - ox < 32 ? ow - ox : 32;
    const __mmask64 in_mask = outputs == 32 ? ~__mmask64{0} : (__mmask64{1} << (2 * outputs)) - 1;
    const __m512i v = max8<kSigned>(_mm512_maskz_loadu_epi8(in_mask, r0 + 2 * ox),
                                    _mm512_maskz_loadu_epi8(in_mask, r1 + 2 * ox));
    const __m512i pairs = max8<kSigned>(v, _mm512_srli_epi16(v, 8));
    _mm256_mask_storeu_epi8(dst + ox, static_cast<__mmask32>((uint64_t{1} << outputs) - 1),
                            _mm512_cvtepi16_epi8(pairs));
  }
}

template <bool kSigned>
void max_2x2_rows(uint8_t* dst, const uint8_t* src, int64_t w, int64_t ow, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r, dst += ow, src += 2 * w) max_2x2_row<kSigned>(dst, src, src + w, ow);
}

}  // namespace

void max_pool_2x2_rows_u8_avx512(uint8_t* dst, const uint8_t* src, int64_t w, int64_t ow, int64_t rows) {
  max_2x2_rows<false>(dst, src, w, ow, rows);
}

void max_pool_2x2_rows_s8_avx512(int8_t* dst, const int8_t* src, int64_t w, int64_t ow, int64_t rows) {
  max_2x2_rows<true>(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src), w, ow, rows);
}

}  // namespace kiln::cpu
