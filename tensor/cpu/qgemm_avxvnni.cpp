// The AvxVnni path of the int8 GEMM (Note [Int8 GEMM paths] in
// tensor/cpu/qgemm.h): the VEX-encoded vpdpbusd on 8 int32 lanes, each lane
// one column and 4 values of k per instruction (Note [Int8 GEMM packing]).
// Compiled with AVX-VNNI; reached only when the CPU has it.
#include <immintrin.h>

#include <cstring>

#include "tensor/cpu/qgemm_simd.h"

namespace kiln::cpu::qgemm_detail {
namespace {

struct Ymm {
  using V = __m256i;
  using AElem = uint8_t;
  static constexpr int kLanes = 8, kGroup = 4, kGroupBytes = 32, kMaxNV = 2;
  // 16 registers: 12 accumulators, 2 of W and the broadcast row of A. One
  // panel (a convolution of up to 8 channels, as LeNet's first) gets 12
  // rows too, not 8: vpdpbusd's latency is 5 cycles at 2 a cycle, so 8
  // chains of accumulation leave a fifth of its throughput unused.
  static constexpr int rows(int nv) { return nv == 1 ? 12 : 6; }
  static V load_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store_i32(int32_t* p, V v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
  static V load_w(const char* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static V broadcast(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static V broadcast_tail(const uint8_t* p, int count) {
    int32_t v = 0;
    std::memcpy(&v, p, count);
    return _mm256_set1_epi32(v);
  }
  static V dot(V acc, V a, V w) { return _mm256_dpbusd_avx_epi32(acc, a, w); }
  static void finish(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
    finish_ymm(c, rows, nv, m0, n0, e);
  }
};

}  // namespace

void qgemm_avxvnni(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e) {
  run_tiles<Ymm>(m, a, lda, w.k(), w, 0, e);
}

void qgemm_runs_avxvnni(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedPanels& w,
                        const Epilogue& e) {
  run_tiles<Ymm>(m, a, lda, runs, 0, w, 0, e);
}

}  // namespace kiln::cpu::qgemm_detail
