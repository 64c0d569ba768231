// AVX-512 GEMM micro-kernels (Note [GEMM blocking] in gemm.h), the same
// structure as gemm_avx2.cpp on zmm registers: a 12 x 32 tile for float32 and
// 12 x 16 for float64, each row two zmm vectors, so the tile takes 24 of the
// 32 zmm registers and 24 independent FMAs per k keep both FMA ports of a
// Skylake-X / Ice Lake / Zen 4 core busy. The kernels themselves are the
// shared templates in tensor/cpu/gemm_kernels.h; this file gives them zmm
// registers.
#include <immintrin.h>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_kernels.h"

namespace kiln::cpu {
namespace {

// The few zmm operations the kernel needs, for each element type.
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

}  // namespace

// B = w.t() is packed by the AVX2 transposing packer (every AVX-512 CPU has
// AVX2): the packing is memory bound, wider registers would not pay.
// Blocks for Skylake-X class cores (L1d 32 KiB, L2 1 MiB): a B sliver KC x NR
// is 24 KiB (float32 and float64, KC = 192); an A block MC x KC 216 KiB of L2.
template <>
GemmKernel<float> gemm_kernel_avx512<float>() {
  return {&vec::select_rows<Zmm, float, 12>, &pack_b_columns_avx2<float>, 12, 32, 288, 192, 4096};
}

template <>
GemmKernel<double> gemm_kernel_avx512<double>() {
  return {&vec::select_rows<Zmm, double, 12>, &pack_b_columns_avx2<double>, 12, 16, 144, 192, 4096};
}

}  // namespace kiln::cpu
