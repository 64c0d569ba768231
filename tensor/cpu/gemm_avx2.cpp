// AVX2 + FMA GEMM micro-kernels (Note [GEMM blocking] in gemm.h): a 6 x 16
// tile for float32 and 6 x 8 for float64, each row two ymm vectors, so the
// tile takes 12 of the 16 ymm registers, leaving 2 for the B row and 1 for
// the broadcast A value. 6 x 2 independent FMAs per k hide the FMA latency
// (4 cycles x 2 ports on Zen / Haswell needs >= 8 in flight). The kernels
// themselves are the shared templates in tensor/cpu/gemm_kernels.h; this file
// gives them ymm registers, and holds the transposing B packer.
#include <immintrin.h>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_kernels.h"

namespace kiln::cpu {
namespace {

// The few ymm operations the kernel needs, for each element type.
template <class T>
struct Ymm;

template <>
struct Ymm<float> {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
};

template <>
struct Ymm<double> {
  using V = __m256d;
  static constexpr int kLanes = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V broadcast(const double* p) { return _mm256_broadcast_sd(p); }
  static V set1(double x) { return _mm256_set1_pd(x); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_pd(a, b); }
};

// ---- packing B = w.t() -------------------------------------------------------

// 8 x 8 float transpose in registers: r[q] becomes element q of every r[j].
void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// 4 x 4 double transpose in registers.
void transpose4(__m256d r[4]) {
  __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

void transpose_block(__m256 r[8]) { transpose8(r); }
void transpose_block(__m256d r[4]) { transpose4(r); }

}  // namespace

// Square blocks of L columns x L k-steps are loaded along k (contiguous),
// transposed in registers and stored as L rows of the sliver; the k remainder
// is copied one value at a time.
template <class T>
void pack_b_columns_avx2(int64_t nr, int64_t kc, const T* b, int64_t csb, T* dst) {
  using Y = Ymm<T>;
  constexpr int L = Y::kLanes;
  for (int64_t j0 = 0; j0 < nr; j0 += L) {
    int64_t p = 0;
    for (; p + L <= kc; p += L) {
      typename Y::V r[L];
      for (int j = 0; j < L; ++j) r[j] = Y::load(b + (j0 + j) * csb + p);
      transpose_block(r);
      for (int q = 0; q < L; ++q) Y::store(dst + (p + q) * nr + j0, r[q]);
    }
    for (; p < kc; ++p) {
      for (int j = 0; j < L; ++j) dst[p * nr + j0 + j] = b[(j0 + j) * csb + p];
    }
  }
}

template void pack_b_columns_avx2<float>(int64_t, int64_t, const float*, int64_t, float*);
template void pack_b_columns_avx2<double>(int64_t, int64_t, const double*, int64_t, double*);

// Blocks for Zen 2/3 (L1d 32 KiB, L2 512 KiB): a B sliver KC x NR is 16 KiB,
// half of L1; an A block MC x KC is 144 KiB for either type, well inside L2;
// a B panel KC x NC (4 / 8 MiB) is L3's. Measured on an EPYC (Zen 3): MC from
// 96 to 240 and KC 256 or 384 change 1024^3 / 2048^3 by less than the noise.
template <>
GemmKernel<float> gemm_kernel_avx2<float>() {
  return {&vec::select_rows<Ymm, float, 6>, &pack_b_columns_avx2<float>, 6, 16, 144, 256, 4080};
}

template <>
GemmKernel<double> gemm_kernel_avx2<double>() {
  return {&vec::select_rows<Ymm, double, 6>, &pack_b_columns_avx2<double>, 6, 8, 72, 256, 4080};
}

}  // namespace kiln::cpu
