// Helpers shared by the autograd tests: float64 leaves and gradcheck as a
// test assertion.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace kiln::gradtest {

using autograd::GradcheckOptions;
using autograd::TensorList;

// A float64 tensor with values uniform in [lo, hi), the same for the same
// seed; no autograd history.
inline Tensor uniform64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator gen(seed);
  Tensor t = kiln::rand(shape, DType::Float64, &gen);
  ops::mul_(t, hi - lo);
  ops::add_(t, lo);
  return t;
}

// A float64 leaf that requires grad, values uniform in [lo, hi).
inline Tensor leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return uniform64(shape, seed, lo, hi).requires_grad_();
}

// A float64 leaf from explicit values.
inline Tensor leaf_of(const std::vector<double>& values, const Shape& shape) {
  return from_vector<double>(values, shape).requires_grad_();
}

// A non-contiguous float64 leaf of `shape` (at least 2-d): the transpose of a
// tensor laid out with the last two dims swapped.
inline Tensor transposed_leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor t = uniform64(swapped, seed, lo, hi).transpose(-1, -2);
  EXPECT_FALSE(t.is_contiguous());
  return t.requires_grad_();
}

// A non-contiguous float64 leaf of `shape`: every other element along the
// last dim of a tensor twice as wide, at a storage offset of 1 row.
inline Tensor strided_leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Shape wide = shape;
  wide.back() *= 2;
  wide[0] += 1;
  Tensor t = uniform64(wide, seed, lo, hi).narrow(0, 1, shape[0]).slice(-1, 0, wide.back(), 2);
  EXPECT_FALSE(t.is_contiguous());
  return t.requires_grad_();
}

// gradcheck as a non-fatal test failure carrying gradcheck's message.
inline void expect_gradcheck(const autograd::GradcheckFn& fn, const TensorList& inputs,
                             const GradcheckOptions& options = {}) {
  try {
    autograd::gradcheck(fn, inputs, options);
  } catch (const Error& e) {
    ADD_FAILURE() << e.message();
  }
}

inline void expect_gradgradcheck(const autograd::GradcheckFn& fn, const TensorList& inputs,
                                 const GradcheckOptions& options = {}) {
  try {
    autograd::gradgradcheck(fn, inputs, options);
  } catch (const Error& e) {
    ADD_FAILURE() << e.message();
  }
}

// Expects fn to throw kiln::Error whose message contains `expected`.
inline void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(expected), std::string::npos)
        << "message was: " << e.message() << "\nexpected to contain: " << expected;
    return;
  }
  ADD_FAILURE() << "expected kiln::Error containing: " << expected;
}

// "[2, 3]", for test traces.
inline std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// The values of t in row-major order, as double.
inline std::vector<double> values(const Tensor& t) {
  Tensor host = t.detach().to(DType::Float64, kCPU).contiguous();
  return std::vector<double>(host.data<double>(), host.data<double>() + host.numel());
}

// Expects equal shapes and every element within tol of `expected`.
inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

// Expects a and b to have the same shape and values within tol.
inline void expect_same(const Tensor& a, const Tensor& b, double tol = 0.0) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  std::vector<double> va = values(a), vb = values(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) && std::isnan(vb[i])) continue;
    EXPECT_NEAR(va[i], vb[i], tol) << "element " << i;
  }
}

}  // namespace kiln::gradtest
