// The Avx2 path of the int8 GEMM (Note [Int8 GEMM paths] in
// tensor/cpu/qgemm.h), for CPUs without VNNI. It has two kernels, and each
// call takes the one that gives the exact result for its data (Note [Int8
// GEMM on AVX2 without VNNI] in qgemm_kernels.h):
//   Ymm8   vpmaddubsw on A's bytes as they are, then vpmaddwd by ones: 4
//          values of k per int32 lane, on the AvxVnni layout of W, and A
//          read in place (runs) as on the VNNI paths;
//   Ymm16  vpmaddwd on A widened to int16 first, 2 values of k per lane, on
//          the int16 copy of W: exact for any bytes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/qgemm_simd.h"

namespace kiln::cpu::qgemm_detail {
namespace {

struct Ymm8 : YmmBytes {
  // 16 registers: the accumulators, W's vectors, the broadcast, the
  // vector of ones and a product. The accumulation chain is one vpaddd, so
  // few rows hide its latency; the two multiplies per step are the limit.
  static constexpr int rows(int nv) { return nv == 1 ? 10 : 5; }
  // a0*w0 + a1*w1 per int16 (exact: the caller checked that it cannot
  // saturate), then the two int16 of each lane summed into int32.
  static V dot(V acc, V a, V w) {
    const V pairs = _mm256_maddubs_epi16(a, w);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

struct Ymm16 {
  using V = __m256i;
  using AElem = int16_t;
  static constexpr int kLanes = 8, kGroup = 2, kGroupBytes = 32, kMaxNV = 2;
  // 16 registers: accumulators, W's vectors, the broadcast and the product.
  static constexpr int rows(int nv) { return nv == 1 ? 8 : 5; }
  static V load_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static V add_i32(V x, V y) { return _mm256_add_epi32(x, y); }
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

// dst[0, count) = src[0, count) widened to int16.
void widen(const uint8_t* src, int64_t count, int16_t* dst) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < count; ++i) dst[i] = src[i];
}

// The Ymm16 kernel on rows [0, m) of A, each row's K values fetched by
// widen_row(i, dst) into k2 int16 (K rounded up to even, zero-padded): a
// block of rows at a time, small enough to stay in L2 while every panel of
// the int16 W passes. skipped_sum as ARunsSkip::sum.
template <class WidenRow>
void widened_tiles(int64_t m, int64_t k, const PackedPanels& wide, const Epilogue& e, const WidenRow& widen_row,
                   const int32_t* skipped_sum = nullptr) {
  const int64_t k2 = (k + 1) / 2 * 2;
  const int64_t block = std::max<int64_t>(8, std::min<int64_t>(m, (256 * 1024) / std::max<int64_t>(2 * k2, 1)));
  thread_local std::vector<int16_t> rows;
  rows.resize(std::min(block, m) * k2 + 16);
  for (int64_t i0 = 0; i0 < m; i0 += block) {
    const int64_t count = std::min(block, m - i0);
    for (int64_t i = 0; i < count; ++i) {
      int16_t* dst = rows.data() + i * k2;
      widen_row(i0 + i, dst);
      if (k2 > k) dst[k] = 0;
    }
    run_tiles<Ymm16>(count, rows.data(), k2, k2, wide, i0, e, skipped_sum);
  }
}

// The largest byte that rows [0, m) of A read: `count` runs of `bytes`
// each, from a + i * lda + offset[r].
uint8_t max_read(int64_t m, const uint8_t* a, int64_t lda, const int64_t* offset, int count, int64_t bytes) {
  uint8_t top = 0;
  for (int64_t i = 0; i < m && top < 255; ++i)
    for (int r = 0; r < count; ++r) top = std::max(top, max_byte(a + i * lda + offset[r], bytes));
  return top;
}

}  // namespace

void qgemm_avx2(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e) {
  const int64_t k = w.k(), start = 0;
  if (avx2_bytes_exact(max_read(m, a, lda, &start, 1, k), w)) {
    run_tiles<Ymm8>(m, a, lda, k, w, 0, e);
    return;
  }
  widened_tiles(m, k, w.wide(), e, [&](int64_t i, int16_t* dst) { widen(a + i * lda, k, dst); });
}

void qgemm_runs_avx2(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedPanels& w,
                     const Epilogue& e, std::optional<uint8_t> a_max) {
  const int64_t run_bytes = runs.groups * 4;
  const int first = runs.skip.first, end = runs.count - runs.skip.last;  // the runs read
  if (avx2_bytes_exact(a_max ? *a_max : max_read(m, a, lda, runs.offset + first, end - first, run_bytes), w)) {
    run_tiles<Ymm8>(m, a, lda, runs, 0, w, 0, e);
    return;
  }
  // The runs of each row gathered and widened in one pass: the patch rows
  // of the GEMM form, in int16, with zeros for the skipped runs.
  widened_tiles(m, w.k(), w.wide(), e, [&](int64_t i, int16_t* dst) {
    for (int r = 0; r < runs.count; ++r) {
      int16_t* run = dst + r * run_bytes;
      if (r < first || r >= end) std::fill(run, run + run_bytes, int16_t{0});
      else widen(a + i * lda + runs.offset[r], run_bytes, run);
    }
  }, runs.skip.sum);
}

}  // namespace kiln::cpu::qgemm_detail
