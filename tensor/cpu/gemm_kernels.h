// The GEMM micro-kernels behind tensor/cpu/gemm.h (Note [GEMM blocking]),
// written once against a register type that gemm_avx2.cpp (Ymm: 8 floats /
// 4 doubles) and gemm_avx512.cpp (Zmm: 16 floats / 8 doubles) define; each of
// those files picks its tile height and cache blocks. Include only from those
// files: everything here uses intrinsics and is compiled with their
// instruction sets.
//
// Vec<T> provides, for T = float and double: V (the register), kLanes;
// zero(), load(p), store(p, v) (unaligned), broadcast(p) (*p in every lane),
// set1(x), fmadd(a, b, c) = a*b + c, mul(a, b).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "tensor/cpu/gemm.h"

namespace kiln::cpu::vec {
// Unnamed: each including file gets its own internal copy, compiled for its
// instruction set, so no instantiation is shared (weak) between the AVX2 and
// AVX-512 objects, and GCC may fold identical ones within a file.
namespace {

// One tile of MR rows and NV vectors per row (NV = 2 for full tiles, 1 for an
// N edge of at most half a tile). A packed A sliver holds MR values per k, so
// an M edge gets a kernel of exactly its row count and computes no padding
// rows; an A read in place (kPackedA false) has rows lda apart.
template <template <class> class Vec, class T, int MR, int NV, bool kPackedA>
void micro_kernel(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t rsc, int64_t csc,
                  int64_t m, int64_t n, T alpha, T beta) {
  using Y = Vec<T>;
  using V = typename Y::V;
  constexpr int L = Y::kLanes;
  constexpr int NR = NV * L;
  constexpr int kFullNR = 2 * L;  // the B sliver's width, whatever NV
  // The tile's rows are about to be written: start fetching them now so the
  // store at the end does not wait on memory.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * rsc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * rsc + NR - 1), _MM_HINT_T0);
  }
  // acc[v][i]: vector v of tile row i. The unroll pragmas make GCC keep the
  // array in registers rather than on the stack.
  V acc[NV][MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[v][i] = Y::zero();
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    // Packed B: 4 k-steps ahead. B read in place: the same row 4 slivers
    // ahead, which the hardware prefetchers miss with K rows in flight.
    _mm_prefetch(reinterpret_cast<const char*>(b + 4 * kFullNR), _MM_HINT_T0);
    V bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = Y::load(b + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      V ai = Y::broadcast(kPackedA ? a + i : a + i * lda);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[v][i] = Y::fmadd(ai, bv[v], acc[v][i]);
    }
    a += kPackedA ? MR : 1;
    b += ldb;
  }

  V va = Y::set1(alpha);
  if (m == MR && n == NR && csc == 1) {
    V vb = Y::set1(beta);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        T* out = c + i * rsc + v * L;
        Y::store(out, beta == T(0) ? Y::mul(va, acc[v][i]) : Y::fmadd(va, acc[v][i], Y::mul(vb, Y::load(out))));
      }
    }
    return;
  }
  // N edge or strided C: write the whole tile to the stack, then only its
  // valid m x n part to C.
  alignas(64) T tile[MR * NR];  // tile: (MR, NR)
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) Y::store(tile + i * NR + v * L, Y::mul(va, acc[v][i]));
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T& out = c[i * rsc + j * csc];
      out = beta == T(0) ? tile[i * NR + j] : tile[i * NR + j] + beta * out;
    }
  }
}

// The kernel for `rows` rows, two vectors per row or one, A packed or not.
template <template <class> class Vec, class T, size_t... Rows>
MicroKernel<T> select_kernel(int64_t rows, bool wide, bool packed_a, std::index_sequence<Rows...>) {
  static constexpr MicroKernel<T> kTable[2][2][sizeof...(Rows)] = {
      {{&micro_kernel<Vec, T, Rows + 1, 1, false>...}, {&micro_kernel<Vec, T, Rows + 1, 2, false>...}},
      {{&micro_kernel<Vec, T, Rows + 1, 1, true>...}, {&micro_kernel<Vec, T, Rows + 1, 2, true>...}}};
  return kTable[packed_a][wide][rows - 1];
}

// GemmKernel::select for tiles of MR rows: one kernel per row count 1..MR.
template <template <class> class Vec, class T, int MR>
MicroKernel<T> select_rows(int64_t rows, bool wide, bool packed_a) {
  return select_kernel<Vec, T>(rows, wide, packed_a, std::make_index_sequence<MR>());
}

}  // namespace
}  // namespace kiln::cpu::vec
