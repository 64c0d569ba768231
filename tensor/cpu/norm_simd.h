// The float32 row sums behind the batch norm and layer norm kernels
// (tensor/cpu/norm.cpp), one copy per SIMD level.
//
// The sums are the same source compiled twice: tensor/cpu/norm.cpp for
// baseline x86-64 (_scalar) and tensor/cpu/norm_avx2.cpp with AVX2/FMA
// (_avx2), which must only be called when simd_level() allows (Note [SIMD
// dispatch]). Each runs over blocks of kNormBlock elements summed in the
// compute type, one partial sum per SIMD lane (`omp simd reduction`), and adds
// each block's total to a float64 total (Note [Blocked summation] in
// tensor/cpu/reduce.cpp).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kiln::cpu {

inline constexpr int64_t kNormBlock = 1024;

struct NormSums {
  double first = 0;
  double second = 0;
};

// Sum of (x - shift) and of its square over x[0..n), contiguous.
NormSums shifted_sums_f32_scalar(const float* x, int64_t n, float shift);
NormSums shifted_sums_f32_avx2(const float* x, int64_t n, float shift);
// Sum of dy * w and of dy * w * (x - mean) over [0, n), contiguous; w may be
// null (all ones).
NormSums grad_sums_f32_scalar(const float* dy, const float* x, const float* w, int64_t n, float mean);
NormSums grad_sums_f32_avx2(const float* dy, const float* x, const float* w, int64_t n, float mean);

// Unnamed: each including file compiles its own copy for its instruction set;
// nothing here may call an out-of-line function that another file could share
// (std::min included), lest one built for AVX2 serve every caller. The loops
// are written out rather than shared through a callback, which GCC leaves
// scalar.
namespace {

template <class T, class C = ComputeType<T>>
NormSums shifted_sums_impl(const T* x, int64_t n, C shift) {
  NormSums total;
  for (int64_t begin = 0; begin < n; begin += kNormBlock) {
    int64_t end = n - begin < kNormBlock ? n : begin + kNormBlock;
    C first = 0, second = 0;
    // The reduction clause lets the compiler keep one partial sum per SIMD
    // lane (a reassociation it may not do on its own).
#pragma omp simd reduction(+ : first, second)
    for (int64_t i = begin; i < end; ++i) {
      C d = static_cast<C>(x[i]) - shift;
      first += d;
      second += d * d;
    }
    total.first += first;
    total.second += second;
  }
  return total;
}

template <class T, class C = ComputeType<T>>
NormSums grad_sums_impl(const T* dy, const T* x, const C* w, int64_t n, C mean) {
  NormSums total;
  for (int64_t begin = 0; begin < n; begin += kNormBlock) {
    int64_t end = n - begin < kNormBlock ? n : begin + kNormBlock;
    C first = 0, second = 0;
    if (w) {
#pragma omp simd reduction(+ : first, second)
      for (int64_t i = begin; i < end; ++i) {
        C g = static_cast<C>(dy[i]) * w[i];
        first += g;
        second += g * (static_cast<C>(x[i]) - mean);
      }
    } else {
#pragma omp simd reduction(+ : first, second)
      for (int64_t i = begin; i < end; ++i) {
        C g = static_cast<C>(dy[i]);
        first += g;
        second += g * (static_cast<C>(x[i]) - mean);
      }
    }
    total.first += first;
    total.second += second;
  }
  return total;
}

}  // namespace
}  // namespace kiln::cpu
