// The AvxVnni path of the int8 GEMM (Note [Int8 GEMM paths] in
// tensor/cpu/qgemm.h): the VEX-encoded vpdpbusd on 8 int32 lanes, each lane
// one column and 4 values of k per instruction (Note [Int8 GEMM packing]).
// Compiled with AVX-VNNI; reached only when the CPU has it.
#include <immintrin.h>

#include <cstring>

#include "tensor/cpu/qgemm_simd.h"

namespace kiln::cpu::qgemm_detail {
namespace {

struct Ymm : YmmBytes {
  // 16 registers: 12 accumulators, 2 of W and the broadcast row of A. One
  // panel (a convolution of up to 8 channels, as LeNet's first) gets 12
  // rows too, not 8: vpdpbusd's latency is 5 cycles at 2 a cycle, so 8
  // chains of accumulation leave a fifth of its throughput unused.
  static constexpr int rows(int nv) { return nv == 1 ? 12 : 6; }
  static V dot(V acc, V a, V w) { return _mm256_dpbusd_avx_epi32(acc, a, w); }
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
