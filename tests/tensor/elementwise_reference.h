// Float64 references and tolerances shared by the elementwise tests.
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <functional>
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

}  // namespace kiln::reference
