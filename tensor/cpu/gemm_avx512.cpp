// AVX-512 GEMM micro-kernels (Note [GEMM blocking] in gemm.h), the same
// structure as gemm_avx2.cpp on zmm registers: a 12 x 32 tile for float32 and
// 12 x 16 for float64, each row two zmm vectors, so the tile takes 24 of the
// 32 zmm registers and 24 independent FMAs per k keep both FMA ports of a
// Skylake-X / Ice Lake / Zen 4 core busy.
#include <immintrin.h>

#include <utility>

#include "tensor/cpu/gemm.h"

namespace kiln::cpu {
namespace {

// The few ymm operations the kernel needs, for each element type.
template <class T>
struct Zmm;

template <>
struct Zmm<float> {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
};

template <>
struct Zmm<double> {
  using V = __m512d;
  static constexpr int kLanes = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static V broadcast(const double* p) { return _mm512_set1_pd(*p); }
  static V set1(double x) { return _mm512_set1_pd(x); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
};

// One tile of MR rows and NV vectors per row (NV = 2 for full tiles, 1 for an
// N edge of at most half a tile). A packed A sliver holds MR values per k, so
// an M edge gets a kernel of exactly its row count and computes no padding
// rows; an A read in place (kPackedA false) has rows lda apart.
template <class T, int MR, int NV, bool kPackedA>
void micro_kernel(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t rsc, int64_t csc,
                  int64_t m, int64_t n, T alpha, T beta) {
  using Y = Zmm<T>;
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
template <class T, size_t... Rows>
MicroKernel<T> select_kernel(int64_t rows, bool wide, bool packed_a, std::index_sequence<Rows...>) {
  static constexpr MicroKernel<T> kTable[2][2][sizeof...(Rows)] = {
      {{&micro_kernel<T, Rows + 1, 1, false>...}, {&micro_kernel<T, Rows + 1, 2, false>...}},
      {{&micro_kernel<T, Rows + 1, 1, true>...}, {&micro_kernel<T, Rows + 1, 2, true>...}}};
  return kTable[packed_a][wide][rows - 1];
}

template <class T>
MicroKernel<T> select12(int64_t rows, bool wide, bool packed_a) {
  return select_kernel<T>(rows, wide, packed_a, std::make_index_sequence<12>());
}

}  // namespace

// B = w.t() is packed by the AVX2 transposing packer (every AVX-512 CPU has
// AVX2): the packing is memory bound, wider registers would not pay.
// Blocks for Skylake-X class cores (L1d 32 KiB, L2 1 MiB): a B sliver KC x NR
// is 24 KiB (float32 and float64, KC = 192); an A block MC x KC 216 KiB of L2.
template <>
GemmKernel<float> gemm_kernel_avx512<float>() {
  return {&select12<float>, &pack_b_columns_avx2<float>, 12, 32, 288, 192, 4096};
}

template <>
GemmKernel<double> gemm_kernel_avx512<double>() {
  return {&select12<double>, &pack_b_columns_avx2<double>, 12, 16, 144, 192, 4096};
}

}  // namespace kiln::cpu
