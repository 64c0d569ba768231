// The Avx2 path of the int8 GEMM (Note [Int8 GEMM paths] in
// tensor/cpu/qgemm.h), for CPUs without VNNI: vpmaddwd on int16, each of 8
// int32 lanes one column and 2 values of k per instruction (Note [Int8 GEMM
// packing]; W is stored widened to int16). vpmaddubsw would take the bytes
// as they are, but it saturates its int16 pair sums, and 255 * 127 * 2 does
// not fit: the result would depend on the data unless activations were 7-bit.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/qgemm_simd.h"

namespace kiln::cpu::qgemm_detail {
namespace {

struct Ymm16 {
  using V = __m256i;
  using AElem = int16_t;
  static constexpr int kLanes = 8, kGroup = 2, kGroupBytes = 32, kMaxNV = 2;
  // 16 registers: accumulators, W's vectors, the broadcast and the product.
  static constexpr int rows(int nv) { return nv == 1 ? 8 : 5; }
  static V load_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store_i32(int32_t* p, V v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
  static V load_w(const char* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static V broadcast(const int16_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static V broadcast_tail(const int16_t* p, int count) {
    int32_t v = 0;
    std::memcpy(&v, p, 2 * count);
    return _mm256_set1_epi32(v);
  }
  static V dot(V acc, V a, V w) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, w)); }
  static void finish(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
    finish_ymm(c, rows, nv, m0, n0, e);
  }
};

}  // namespace

void qgemm_avx2(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e) {
  // A is widened to int16 a block of rows at a time (rows of k rounded up to
  // even, zero-padded), small enough to stay in L2 while every panel passes.
  const int64_t k = w.k();
  const int64_t k2 = (k + 1) / 2 * 2;
  const int64_t block = std::max<int64_t>(8, std::min<int64_t>(m, (256 * 1024) / std::max<int64_t>(2 * k2, 1)));
  thread_local std::vector<int16_t> wide;
  wide.resize(std::min(block, m) * k2 + 16);
  for (int64_t i0 = 0; i0 < m; i0 += block) {
    const int64_t rows = std::min(block, m - i0);
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* src = a + (i0 + i) * lda;
      int16_t* dst = wide.data() + i * k2;
      int64_t kk = 0;
      for (; kk + 16 <= k; kk += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kk),
                            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + kk))));
      for (; kk < k; ++kk) dst[kk] = src[kk];
      if (k2 > k) dst[k] = 0;
    }
    run_tiles<Ymm16>(rows, wide.data(), k2, k2, w, i0, e);
  }
}

}  // namespace kiln::cpu::qgemm_detail
