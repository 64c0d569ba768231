// Helpers for tests that compare the CUDA backend with the CPU backend
// (cuda_elementwise_test.cpp, cuda_reduce_test.cpp), in their own namespace
// so that they cannot clash with other tests' helpers in the same binary.
#pragma once

#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cuda/device.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

#define SKIP_WITHOUT_GPU() \
  if (!::kiln::cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"

namespace kiln::backend_compare {

inline constexpr DType kEveryDType[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int32,  DType::Int64,
                                        DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
inline constexpr DType kFloatDTypes[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

inline Device gpu() { return cuda_device(0); }

// A CPU tensor of `dtype` with pseudo-random values: floats in [-3, 3),
// signed integers in [-50, 50), uint8 in [0, 100), bools half true. With
// nonzero, zeros become ones (divisors).
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, bool nonzero = false) {
  int64_t numel = shape_numel(shape, "random_tensor");
  double lo = -3, hi = 3;
  if (dtype == DType::Bool) lo = 0, hi = 2;
  if (dtype == DType::UInt8) lo = 0, hi = 100;
  if (dtype == DType::Int8 || dtype == DType::Int32 || dtype == DType::Int64) lo = -50, hi = 50;
  std::vector<double> values = pseudo_random(numel, lo, hi, seed);
  for (double& v : values) {
    if (!is_floating(dtype)) v = std::floor(v);
    if (nonzero && v == 0) v = 1;
  }
  return from_vector(values, shape).to(dtype);
}

// Sets element k (row-major) of contiguous floating `t` to `value`, when it exists.
inline void set_flat(const Tensor& t, int64_t k, double value) {
  if (k >= t.numel()) return;
  Tensor flat = t.view({t.numel()});
  visit_dtype(t.dtype(), [&]<class T>() { flat.data<T>()[k] = static_cast<T>(static_cast<ComputeType<T>>(value)); });
}

// Relative tolerance for results of `dtype` computed by two backends.
inline double tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::Float16:
      return 2e-3;
    case DType::BFloat16:
      return 1.6e-2;
    case DType::Float32:
      return 2e-5;
    case DType::Float64:
      return 1e-12;
    default:
      return 0;
  }
}

// expected (CPU) vs actual (copied back from the GPU): equal shapes and
// dtypes; integers and bools exactly, floats within rtol * |e| + atol, NaN
// where NaN, infinities equal. `what` names the case in failures.
inline void expect_matches(const Tensor& expected, const Tensor& actual, const std::string& what, double rtol,
                           double atol = 0) {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  Tensor a_cpu = actual.cpu();
  if (!is_floating(expected.dtype())) {
    Tensor e = expected.to(DType::Int64).contiguous(), a = a_cpu.to(DType::Int64).contiguous();
    const int64_t* pe = e.data<int64_t>();
    const int64_t* pa = a.data<int64_t>();
    for (int64_t i = 0; i < e.numel(); ++i) {
      if (pe[i] != pa[i]) {
        ADD_FAILURE() << what << ": element " << i << " of " << e.numel() << ": expected " << pe[i] << ", got "
                      << pa[i];
        return;
      }
    }
    return;
  }
  Tensor e = expected.to(DType::Float64).contiguous(), a = a_cpu.to(DType::Float64).contiguous();
  const double* pe = e.data<double>();
  const double* pa = a.data<double>();
  for (int64_t i = 0; i < e.numel(); ++i) {
    bool ok = std::isnan(pe[i])   ? std::isnan(pa[i])
              : std::isinf(pe[i]) ? pe[i] == pa[i]
                                  : std::abs(pe[i] - pa[i]) <= rtol * std::abs(pe[i]) + atol;
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << " of " << e.numel() << ": expected " << pe[i] << ", got " << pa[i]
                    << " (rtol " << rtol << ", atol " << atol << ")";
      return;
    }
  }
}

// A view of a base tensor, applied alike to the CPU and the GPU copy.
using View = std::function<Tensor(const Tensor&)>;
inline Tensor identity_view(const Tensor& t) { return t; }

}  // namespace kiln::backend_compare

#endif  // KILN_WITH_CUDA
