// Kiln's own CPU GEMM: C = alpha * A @ B + beta * C on raw strided pointers.
//
// Note [GEMM blocking]
// The loops follow GotoBLAS / BLIS. For each block of NC columns of C (jc)
// and each block of KC of the inner dimension (pc), a KC x NC panel of B is
// copied ("packed") into NR-wide slivers laid out k-major, so the micro-kernel
// reads it with unit stride; for each block of MC rows (ic) a MC x KC panel of
// A is packed into MR-tall slivers the same way. The micro-kernel keeps an
// MR x NR tile of C in vector registers for the whole KC loop: per k it loads
// one row of the B sliver (NR values, two vectors), broadcasts MR values of
// the A sliver and issues 2*MR FMAs. Sizes are chosen so that a B sliver
// (KC x NR) stays in L1 while A slivers stream from an A block (MC x KC) held
// in L2, and the B panel (KC x NC) sits in L3. Packing reads through the
// operands' row and column strides, so a transposed operand costs no copy
// beyond the packing that happens anyway. A transposed A (a weight gradient's
// g.t(), each k's rows side by side) is packed a whole block at a time, k by
// k, in contiguous runs of MC values, and a row-major B (that gradient's x) a
// whole panel at a time in runs of NC values: sliver by sliver they would read
// a few values from each of KC rows far apart, and wait on memory for every one.
//
// Edges waste no work on rows: every SIMD file provides a kernel for each row
// count 1..MR, and the last A sliver of a block is packed with exactly its
// rows. An N edge of at most NR / 2 columns gets a half-width kernel; other N
// edges compute a full tile from a zero-padded B sliver and write their valid
// columns through a small temporary.
//
// Small problems skip packing where it cannot pay. A row-major A whose packed
// block would serve only a few B slivers (N small) is read in place, rows lda
// apart. When B is row-major and M is a few tiles at most (LeNet's conv
// weights: M = 6 or 16), no B sliver is reused enough to pay for packing it,
// and the kernel reads B in place too, row stride rsb (gemm_direct_b).
//
// Threads: the FLOP count decides how many threads are worth starting (small
// products stay on the caller's thread). Threads take disjoint column (or row)
// ranges of C and run the blocked loops independently, each packing its own
// panels: no barriers inside a product, so a thread that loses its core on a
// busy machine delays only the end. A product long in K against a small C
// (K >= 4 max(M, N): a weight gradient, K = the batch's tokens) is split along
// K instead, since splitting rows or columns would have each thread pack the
// whole of the other operand: threads sum their K ranges into C and private
// partial Cs, which are added to C in thread order at the end (so the result
// does not depend on timing). A batch of small products runs one product per
// thread instead.
//
// beta == 0 means "C is output only": its old contents are never read, so NaN
// in C does not leak into the result (BLAS semantics).
#pragma once

#include <cstdint>

#include "tensor/cpu/cpu_features.h"

namespace kiln::cpu {

// C (M, N) = alpha * A (M, K) @ B (K, N) + beta * C; element (i, j) of A lives
// at A[i * rsa + j * csa] (and likewise for B and C), so a transposed operand
// is passed by swapping its strides:
//   sgemm(M, N, K, 1.f, a, K, 1, w, 1, K, 0.f, c, N, 1);  // c = a @ w.t(), w: (N, K)
// C must not overlap A or B. Uses up to get_num_threads() threads.
void sgemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t rsa, int64_t csa, const float* B,
           int64_t rsb, int64_t csb, float beta, float* C, int64_t rsc, int64_t csc);
void dgemm(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t rsa, int64_t csa,
           const double* B, int64_t rsb, int64_t csb, double beta, double* C, int64_t rsc, int64_t csc);

// `batch` products; operand X of product b starts at X + b * bsX. A batch
// stride of 0 broadcasts one matrix to all products (C's must not be 0).
template <class T>
struct GemmArgs {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  T alpha = 1, beta = 0;
  const T* a = nullptr;
  int64_t bsa = 0, rsa = 0, csa = 0;
  const T* b = nullptr;
  int64_t bsb = 0, rsb = 0, csb = 0;
  T* c = nullptr;
  int64_t bsc = 0, rsc = 0, csc = 0;
};

void sgemm_batched(const GemmArgs<float>& args);
void dgemm_batched(const GemmArgs<double>& args);

// As the batched calls, but with the micro-kernel's SIMD level and the thread
// count given rather than taken from simd_level() / get_num_threads(), so that
// tests reach the scalar kernel on an AVX2 machine and the benchmark can pin
// threads. `level` must not exceed what the CPU supports.
template <class T>
void gemm_at_level(const GemmArgs<T>& args, SimdLevel level, int max_threads);

// The plain triple loop the fast path is tested against: accumulates in
// double, one product at a time, one thread.
template <class T>
void gemm_reference(const GemmArgs<T>& args);

// ---- the pieces each SIMD file provides (Note [SIMD dispatch]) ----

// c[0:m, 0:n] = alpha * (A_sliver @ B_sliver) + beta * c (c's old values
// unread when beta == 0). The A sliver is R rows by kc, R the kernel's row
// count: packed, (kc, R) k-major at a, passed with lda = 0; or read in place,
// row i at a + i * lda with unit stride along k. The B sliver is kc rows of NR values,
// row p at b + p * ldb (ldb = NR when packed). The kernel computes all of its
// R x W tile (W = NR, or NR / 2 for a narrow kernel) and writes the m x n part
// (m == R, n <= W).
template <class T>
using MicroKernel = void (*)(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t rsc,
                             int64_t csc, int64_t m, int64_t n, T alpha, T beta);

// A family of micro-kernels with the tile they compute and the cache blocks
// sized for it. select(r, wide, packed_a) gives the kernel for r rows
// (1 <= r <= mr), so an M edge wastes no rows, computing NR columns (wide) or
// NR / 2 (an N edge of at most NR / 2 columns), with A packed or in place.
template <class T>
struct GemmKernel {
  MicroKernel<T> (*select)(int64_t rows, bool wide, bool packed_a);
  // Packs a full B sliver whose columns are contiguous (rsb == 1, as for
  // B = w.t()): dst (kc, nr) from column j at b + j * csb. Null: the portable
  // packer does it.
  void (*pack_b_columns)(int64_t nr, int64_t kc, const T* b, int64_t csb, T* dst);
  int64_t mr, nr;      // full register tile
  int64_t mc, kc, nc;  // cache blocks: mc % mr == 0, nc % nr == 0
};

template <class T>
GemmKernel<T> gemm_kernel_scalar();
template <class T>
GemmKernel<T> gemm_kernel_avx2();
template <class T>
GemmKernel<T> gemm_kernel_avx512();
// The transposing B packer, in gemm_avx2.cpp; nr a multiple of the vector
// width (8 floats, 4 doubles).
template <class T>
void pack_b_columns_avx2(int64_t nr, int64_t kc, const T* b, int64_t csb, T* dst);

}  // namespace kiln::cpu
