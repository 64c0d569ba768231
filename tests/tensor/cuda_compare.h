// Helpers for the tests that compare the CUDA backend with the CPU backend.
#pragma once

#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tensor/cuda/device.h"
#include "tests/tensor/test_util.h"

#ifndef SKIP_WITHOUT_GPU
#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"
#endif

// In a namespace of their own: other test helpers of the same binary have
// functions of the same names.
namespace kiln::cuda_compare {

// A CPU tensor of `dtype` with values in [lo, hi) drawn from `seed`.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1, double hi = 1) {
  return from_vector(pseudo_random(shape_numel(shape, "random_tensor"), lo, hi, seed), shape).to(dtype);
}

// Expects |actual - expected| <= atol + rtol * |expected| element by element;
// either may live on any device.
inline void expect_close(const Tensor& expected_anywhere, const Tensor& actual, double rtol, double atol,
                         const std::string& what = "") {
  ASSERT_EQ(expected_anywhere.shape(), actual.shape()) << what;
  const Tensor expected = expected_anywhere.to(kCPU), got = actual.to(kCPU);
  int64_t reported = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double e = flat_value(expected, i), a = flat_value(got, i);
    const bool both_nan = std::isnan(e) && std::isnan(a);
    if (!both_nan && !(std::abs(a - e) <= atol + rtol * std::abs(e)) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << e;
    }
  }
}

// Relative tolerance between two results rounded to `dtype` after float32
// (float64) accumulation in different orders: a few units in the last place.
inline double tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 1e-5;
    case DType::Float16: return 4e-3;
    case DType::BFloat16: return 2e-2;
    default: return 0;
  }
}

}  // namespace kiln::cuda_compare

#endif  // KILN_WITH_CUDA
