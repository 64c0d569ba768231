// The Avx512Vnni path of the int8 GEMM (Note [Int8 GEMM paths] in
// tensor/cpu/qgemm.h): vpdpbusd on 16 int32 lanes, each lane one column and
// 4 values of k per instruction (Note [Int8 GEMM packing]). Compiled with
// AVX-512 VNNI; reached only when the CPU has it.
// GCC 12's AVX-512 intrinsics start from a self-initialised "undefined"
// register and so warn (GCC bug 105593, fixed in 12.3); the warning is about
// the compiler's header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "tensor/cpu/qgemm_simd.h"

namespace kiln::cpu::qgemm_detail {
namespace {

struct Zmm {
  using V = __m512i;
  using AElem = uint8_t;
  static constexpr int kLanes = 16, kGroup = 4, kGroupBytes = 64, kMaxNV = 4;
  // 24 accumulators at most, leaving registers for W's vectors and the
  // broadcast row of A; one panel gets 16 rows, whole columns for the
  // output stage of an NCHW plane (finish_zmm).
  static constexpr int rows(int nv) { return nv == 1 ? 16 : nv == 2 ? 12 : nv == 3 ? 8 : 6; }
  static V load_i32(const int32_t* p) { return _mm512_loadu_si512(p); }
  static V add_i32(V x, V y) { return _mm512_add_epi32(x, y); }
  static void store_i32(int32_t* p, V v) { _mm512_store_si512(p, v); }
  static V load_w(const char* p) { return _mm512_load_si512(p); }
  static V broadcast(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static V broadcast_tail(const uint8_t* p, int count) {
    int32_t v = 0;
    std::memcpy(&v, p, count);
    return _mm512_set1_epi32(v);
  }
  static V dot(V acc, V a, V w) { return _mm512_dpbusd_epi32(acc, a, w); }
  static void finish(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
    finish_zmm(c, rows, nv, m0, n0, e);
  }
};

}  // namespace

void qgemm_avx512vnni(int64_t m, const uint8_t* a, int64_t lda, const PackedPanels& w, const Epilogue& e) {
  run_tiles<Zmm>(m, a, lda, w.k(), w, 0, e);
}

void qgemm_runs_avx512vnni(int64_t m, const uint8_t* a, int64_t lda, const ARuns& runs, const PackedPanels& w,
                           const Epilogue& e) {
  run_tiles<Zmm>(m, a, lda, runs, 0, w, 0, e);
}

}  // namespace kiln::cpu::qgemm_detail
