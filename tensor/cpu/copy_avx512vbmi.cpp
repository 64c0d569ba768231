// The byte-plane interleave of copy_simd.h with AVX-512 VBMI byte permutes.
// GCC 12's AVX-512 intrinsics warn about their own "undefined" registers
// (GCC bug 105593), as in qgemm_amx.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "tensor/cpu/copy_simd.h"

namespace kiln::cpu {

void interleave_planes_u8_avx512vbmi(uint8_t* dst, const uint8_t* src, int64_t plane_stride, int64_t planes,
                                     int64_t n) {
  const uint8_t* rows[16];
  for (int64_t c = 0; c < planes; ++c) rows[c] = src + c * plane_stride;
  interleave_rows_u8_avx512vbmi(dst, rows, planes, n);
}

void interleave_rows_u8_avx512vbmi(uint8_t* dst, const uint8_t* const* rows, int64_t planes, int64_t n) {
  // A step takes `step` pixels: plane c's bytes for them sit at byte
  // step * c of the 128 bytes held by lo (the first 64) and hi (the rest),
  // and output byte i = x * planes + c of the step is source byte
  // step * c + x, which vpermt2b picks from the pair (its index's bit 6
  // chooses hi).
  const int64_t step = planes <= 8 ? 16 : 8;
  alignas(64) uint8_t index[128] = {};
  for (int64_t x = 0; x < step; ++x)
    for (int64_t c = 0; c < planes; ++c) index[x * planes + c] = static_cast<uint8_t>(step * c + x);
  const __m512i index_lo = _mm512_load_si512(index), index_hi = _mm512_load_si512(index + 64);
  const __mmask64 all = ~__mmask64{0};
  for (int64_t x = 0; x < n; x += step) {
    const int64_t pixels = n - x < step ? n - x : step;
    const __mmask64 row = (__mmask64{1} << pixels) - 1;  // the pixels' bytes of one plane
    // Each plane's bytes are loaded on their own (no load waits for
    // another) and ORed into place: a masked load from step * c bytes before
    // the plane's pixels puts them at their place in the register, and
    // masked-off bytes are neither read nor can fault.
    __m512i part[16];
    for (int64_t c = 0; c < planes; ++c) {
      const int64_t at = step * c % 64;
      part[c] = _mm512_maskz_loadu_epi8(row << at, rows[c] + x - at);
    }
    const int64_t low_planes = planes < 64 / step ? planes : 64 / step;
    __m512i lo = part[0], hi = _mm512_setzero_si512();
    for (int64_t c = 1; c < low_planes; ++c) lo = _mm512_or_si512(lo, part[c]);
    for (int64_t c = low_planes; c < planes; ++c) hi = _mm512_or_si512(hi, part[c]);
    const int64_t out = pixels * planes;
    uint8_t* to = dst + x * planes;
    _mm512_mask_storeu_epi8(to, out >= 64 ? all : (__mmask64{1} << out) - 1,
                            _mm512_permutex2var_epi8(lo, index_lo, hi));
    if (out > 64) {
      _mm512_mask_storeu_epi8(to + 64, out >= 128 ? all : (__mmask64{1} << (out - 64)) - 1,
                              _mm512_permutex2var_epi8(lo, index_hi, hi));
    }
  }
}

}  // namespace kiln::cpu
