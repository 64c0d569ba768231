// Float64 references and tolerances shared by the elementwise tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace kiln::reference {


// Values in row-major order, as float64.
inline std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

inline Tensor random_tensor(const Shape& shape, double lo, double hi, DType dtype = DType::Float32, unsigned seed = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  return from_vector<double>(v, shape).to(dtype);
}

// Reference a `f` b with NumPy broadcasting, by index arithmetic on the
// row-major values; returns the expected values of the result shape.
inline std::vector<double> broadcast_reference(const Tensor& a, const Tensor& b,
                                               const std::function<double(double, double)>& f) {
  Shape out = broadcast_shapes(a.shape(), b.shape(), "test");
  std::vector<double> va = values(a), vb = values(b), result;
  auto offset = [&](const Shape& shape, const Shape& index) {
    int64_t o = 0;
    size_t lead = out.size() - shape.size();
    for (size_t d = 0; d < shape.size(); ++d) o = o * shape[d] + (shape[d] == 1 ? 0 : index[lead + d]);
    return o;
  };
  Shape index(out.size(), 0);
  for (int64_t i = 0; i < shape_numel(out); ++i) {
    int64_t rest = i;
    for (size_t d = out.size(); d-- > 0;) {
      index[d] = rest % out[d];
      rest /= out[d];
    }
    result.push_back(f(va[offset(a.shape(), index)], vb[offset(b.shape(), index)]));
  }
  return result;
}

// The spacing of float32 values at |x| (the subnormal spacing below FLT_MIN).
inline double float_ulp(double x) {
  double a = std::fabs(x);
  if (a < FLT_MIN) return std::ldexp(1.0, -149);
  int e;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - 24);
}

// Expects got to equal the float64 reference within `ulps` float32 ulps;
// NaN must match NaN and infinities must match exactly.
inline void expect_close_ulps(const std::vector<double>& got, const std::vector<double>& ref,
                              const std::vector<double>& ulps, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref[i]) || std::isinf(ref[i]) || std::isinf(static_cast<float>(ref[i]))) {
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
      } else {
        EXPECT_EQ(got[i], static_cast<double>(static_cast<float>(ref[i]))) << what << " at " << i;
      }
      continue;
    }
    EXPECT_LE(std::fabs(got[i] - ref[i]), ulps[i] * float_ulp(ref[i]))
        << what << " at " << i << ": got " << got[i] << ", reference " << ref[i];
  }
}

inline void expect_close_ulps(const std::vector<double>& got, const std::vector<double>& ref, double ulps,
                              const std::string& what) {
  expect_close_ulps(got, ref, std::vector<double>(ref.size(), ulps), what);
}

// Exact float32 results: +, -, *, / and sqrt of floats computed in float64
// and rounded once to float32 are the correctly rounded float32 results.
inline std::vector<double> round_to_float(std::vector<double> v) {
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

// gelu's derivative in long double (a 64-bit mantissa on x86-64), by
// formulas other than the kernels': Phi through erfc and x phi(x) as
// written, or for the tanh form (torch's approximate='tanh')
// 0.5 (1 + tanh u) = 1 / (1 + e^(-2u)) and 1 - tanh(u)^2 = 1 / cosh(u)^2.
// NaN at +-inf, as torch's formulas (x phi(x) is inf * 0). `terms`
// receives the larger magnitude of the two terms summed: where they cancel
// (near the root x = -0.75) a float evaluation is accurate to ulps of that,
// not of the result.
inline long double gelu_derivative_reference(long double x, bool tanh_approximation, long double* terms = nullptr) {
  const long double pi = 3.141592653589793238462643383279502884L;
  long double left, right;
  if (!tanh_approximation) {
    left = 0.5L * std::erfc(-x / std::sqrt(2.0L));
    right = x * std::exp(-x * x / 2) / std::sqrt(2 * pi);
  } else {
    const long double k = std::sqrt(2 / pi), c = 0.044715L;
    long double u = k * (x + c * x * x * x);
    long double cosh_u = std::cosh(u);
    left = 1 / (1 + std::exp(-2 * u));
    right = 0.5L * x * k * (1 + 3 * c * x * x) / (cosh_u * cosh_u);
  }
  if (terms) *terms = std::max(std::fabs(left), std::fabs(right));
  return left + right;
}

// n + 1 float32 points evenly over [lo, hi], then the values every SIMD
// kernel must handle: signed zeros, subnormals, the extremes, infinities
// and NaN.
inline std::vector<float> sweep(double lo, double hi, int n) {
  std::vector<float> x;
  for (int i = 0; i <= n; ++i) x.push_back(static_cast<float>(lo + (hi - lo) * i / n));
  for (float s : {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-20f, -1e-20f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(s);
  }
  return x;
}

}  // namespace kiln::reference
