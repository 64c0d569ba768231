// Output rows of the 2x2 / stride 2 int8 max pool (quantized_pool.cpp)
// with AVX2: 32 outputs from 64 bytes of each input row, as the AVX-512
// loop does (quantized_pool_avx512.cpp) but narrowing with a pack. AVX2 has
// no byte-masked loads or stores, so a row's last outputs go through a
// buffer of their own.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/cpu/quantized_pool_simd.h"

namespace kiln::cpu {
namespace {

template <bool kSigned>
inline __m256i max8(__m256i a, __m256i b) {
  return kSigned ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
}

inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Each 16-bit lane's max of its two bytes, in its low byte; the high byte 0.
template <bool kSigned>
inline __m256i pair_max(__m256i v) {
  return _mm256_and_si256(max8<kSigned>(v, _mm256_srli_epi16(v, 8)), _mm256_set1_epi16(0x00FF));
}

// 32 outputs from 64 bytes at r0 and at r1.
template <bool kSigned>
inline __m256i max_2x2_32(const uint8_t* r0, const uint8_t* r1) {
  const __m256i lo = pair_max<kSigned>(max8<kSigned>(load(r0), load(r1)));
  const __m256i hi = pair_max<kSigned>(max8<kSigned>(load(r0 + 32), load(r1 + 32)));
  // The pack works within 128-bit halves, giving quadwords (lo 0, hi 0,
  // lo 1, hi 1); the permute puts them in order.
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
}

template <bool kSigned>
void max_2x2_row(uint8_t* dst, const uint8_t* r0, const uint8_t* r1, int64_t ow) {
  int64_t ox = 0;
  for (; ox + 32 <= ow; ox += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + ox), max_2x2_32<kSigned>(r0 + 2 * ox, r1 + 2 * ox));
  }
  if (ox == ow) return;
  const size_t outputs = static_cast<size_t>(ow - ox);
  alignas(32) uint8_t in0[64] = {}, in1[64] = {}, out[32];
  std::memcpy(in0, r0 + 2 * ox, 2 * outputs);
  std::memcpy(in1, r1 + 2 * ox, 2 * outputs);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), max_2x2_32<kSigned>(in0, in1));
  std::memcpy(dst + ox, out, outputs);
}

template <bool kSigned>
void max_2x2_rows(uint8_t* dst, const uint8_t* src, int64_t w, int64_t ow, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r, dst += ow, src += 2 * w) max_2x2_row<kSigned>(dst, src, src + w, ow);
}

}  // namespace

void max_pool_2x2_rows_u8_avx2(uint8_t* dst, const uint8_t* src, int64_t w, int64_t ow, int64_t rows) {
  max_2x2_rows<false>(dst, src, w, ow, rows);
}

void max_pool_2x2_rows_s8_avx2(int8_t* dst, const int8_t* src, int64_t w, int64_t ow, int64_t rows) {
  max_2x2_rows<true>(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src), w, ow, rows);
}

}  // namespace kiln::cpu
