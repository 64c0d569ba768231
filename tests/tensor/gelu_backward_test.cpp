// ops::gelu_backward, the fused g * gelu'(x) of both approximations, against
// long double references of the formulas (elementwise_reference.h) in every
// floating dtype and layout; the float32 vector kernels' own accuracy is in
// elementwise_simd_test.cpp and the autograd wiring in unary_grad_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/elementwise_reference.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

using reference::gelu_derivative_reference;
using reference::values;

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

// x over [-40, 40] densely, where both derivatives go from 0 (subnormal in
// float64 near -38 for the exact form) through the root near -0.75 to 1,
// plus the values every kernel must handle; an even count, for strided().
std::vector<double> wide_x() {
  std::vector<double> x;
  for (int i = 0; i <= 80000; ++i) x.push_back(-40 + 80.0 * i / 80000);
  for (double s : {0.0, -0.0, 1e-310, -1e-310, 1e-40, -1e-40, DBL_MIN, 1e30, -1e30, 1e200, -1e200, DBL_MAX, -DBL_MAX,
                   kInf, -kInf, kNan, 0.75}) {
    x.push_back(s);
  }
  return x;
}

// |got - ref| in units of the spacing of `dtype` at `scale` (>= |ref|; the
// larger term where the formula's two terms cancel): ulps of float64 or
// float32, or the precision of the 16-bit types.
double error_in_ulps(double got, long double ref, long double scale, DType dtype) {
  if (std::isnan(static_cast<double>(ref))) return std::isnan(got) ? 0 : INFINITY;
  int digits = dtype == DType::Float64 ? 53 : dtype == DType::Float32 ? 24 : dtype == DType::Float16 ? 11 : 8;
  double min_normal = dtype == DType::Float64 ? DBL_MIN : dtype == DType::Float32 ? FLT_MIN : dtype == DType::Float16 ? 6.103515625e-05 : FLT_MIN;
  double a = std::max(std::fabs(static_cast<double>(scale)), min_normal);
  int e;
  std::frexp(a, &e);
  return std::fabs(static_cast<long double>(got) - ref) / std::ldexp(1.0, e - digits);
}

// The same values with inner stride 2, which the float32 vector kernels
// do not take: the scalar loop runs.
Tensor strided(const Tensor& t) { return t.view({2, -1}).t().contiguous().t(); }

struct Bound {
  DType dtype;
  double ulps;
};

// Every dtype against the reference at its own (already rounded) inputs.
// Each path computes gelu' in double and rounds g * gelu' once to the
// dtype, except the float32 vector kernels (contiguous float32 here), whose
// bounds elementwise_simd_test.cpp explains; float64 is within a few ulps of
// its larger term (std::erfc and std::exp's own errors) and, for the tanh
// form of negative x, of the function's conditioning 3|2u| (the rounding of
// 2u in double, amplified by e^(2u)).
TEST(GeluBackward, EveryDTypeMatchesTheReferenceOverAWideRange) {
  std::vector<double> xs = wide_x();
  std::vector<double> gs = pseudo_random(static_cast<int64_t>(xs.size()), -4, 4, 7);
  const int64_t n = static_cast<int64_t>(xs.size());
  for (bool tanh_form : {false, true}) {
    for (Bound b : {Bound{DType::Float64, 6}, Bound{DType::Float32, tanh_form ? 4.0 : 6.0}, Bound{DType::Float16, 1},
                    Bound{DType::BFloat16, 1}}) {
      Tensor x = from_vector<double>(xs, {n}).to(b.dtype), g = from_vector<double>(gs, {n}).to(b.dtype);
      for (const auto& [gt, xt, layout] :
           {std::tuple{g, x, "contiguous"}, std::tuple{strided(g), strided(x), "strided"}}) {
        Tensor out = gelu_backward(gt, xt, tanh_form);
        ASSERT_EQ(out.dtype(), b.dtype);
        std::vector<double> got = values(out), xv = values(xt), gv = values(gt);
        // The float32 scalar loop rounds the product of doubles once.
        bool float_vector = b.dtype == DType::Float32 && std::string(layout) == "contiguous";
        double allowed = b.dtype == DType::Float32 && !float_vector ? 0.501 : b.ulps;
        double worst = 0;
        for (int64_t i = 0; i < n; ++i) {
          long double terms = 0;
          long double d = gelu_derivative_reference(xv[i], tanh_form, &terms);
          double bound = allowed;
          // The tanh form in float64 and in the float32 vector kernels: the
          // rounding of 2u = 2k(x + c x^3), which e^(2u) multiplies by |2u|
          // for negative x (the function's own conditioning there).
          if (tanh_form && (b.dtype == DType::Float64 || float_vector) && xv[i] < 0) {
            bound += 3 * 2 * 0.798 * std::fabs(xv[i] + 0.044715 * xv[i] * xv[i] * xv[i]);
          }
          long double ref = gv[i] * d;
          double err = error_in_ulps(got[i], ref, std::max(std::fabs(ref), std::fabs(gv[i] * terms)), b.dtype);
          worst = std::max(worst, err / bound);
          ASSERT_LE(err, bound) << (tanh_form ? "gelu_tanh " : "gelu ") << b.dtype << " " << layout << " x=" << xv[i]
                                << " g=" << gv[i] << ": got " << got[i] << ", reference " << static_cast<double>(ref);
        }
        std::cout << "[ accuracy ] " << (tanh_form ? "gelu_tanh_backward " : "gelu_backward ") << b.dtype << " "
                  << layout << ": " << worst << " of the bound\n";
      }
    }
  }
}

TEST(GeluBackward, TheExactTailKeepsItsRelativePrecision) {
  // At x = -30 the derivative is about -1.5e-194: 1 + erf(x / sqrt 2) would
  // be 0 there, and e^(-x^2/2) without the split of x^2 would be off by
  // hundreds of ulps.
  for (double x : {-5.0, -10.0, -20.0, -30.0, -37.0}) {
    double got = gelu_backward(full({1}, 1.0, DType::Float64), full({1}, x, DType::Float64)).item<double>();
    long double ref = gelu_derivative_reference(x, false);
    EXPECT_LT(got, 0) << x;
    EXPECT_NEAR(static_cast<double>(got / ref), 1.0, 1e-14) << "x = " << x;
  }
}

TEST(GeluBackward, SpecialValues) {
  // gelu'(+-0) = 1/2, +-inf and NaN give NaN (torch: inf * 0), far out the
  // derivative is exactly 1 and 0, and a NaN or inf gradient propagates.
  std::vector<double> xs = {0.0, -0.0, kInf, -kInf, kNan, 1e4, -1e4, 2.0, -40.0, 0.5};
  std::vector<double> gs = {3.0, 3.0, 1.0, 1.0, 1.0, 2.0, 2.0, kNan, 1.0, kInf};
  for (bool tanh_form : {false, true}) {
    for (DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      for (int repeat : {1, 5}) {  // 50 elements reach the float32 vector loop
        std::vector<double> x, g;
        for (int r = 0; r < repeat; ++r) x.insert(x.end(), xs.begin(), xs.end()), g.insert(g.end(), gs.begin(), gs.end());
        const int64_t n = static_cast<int64_t>(x.size());
        std::vector<double> got =
            values(gelu_backward(from_vector<double>(g, {n}).to(dtype), from_vector<double>(x, {n}).to(dtype), tanh_form));
        std::string what = std::string(tanh_form ? "gelu_tanh " : "gelu ") + std::string(dtype_name(dtype));
        for (int64_t k = 0; k < n; k += static_cast<int64_t>(xs.size())) {
          EXPECT_EQ(got[k + 0], 1.5) << what;
          EXPECT_EQ(got[k + 1], 1.5) << what;
          for (int i : {2, 3, 4, 7}) EXPECT_TRUE(std::isnan(got[k + i])) << what << " at " << i;
          EXPECT_EQ(got[k + 5], 2.0) << what;
          EXPECT_EQ(got[k + 6], 0.0) << what;
          EXPECT_EQ(got[k + 8], 0.0) << what;
          EXPECT_TRUE(std::isinf(got[k + 9]) && got[k + 9] > 0) << what;
        }
      }
    }
  }
}

TEST(GeluBackward, BroadcastsAndPromotes) {
  Tensor g = reference::random_tensor({3, 1}, -2, 2, DType::Float32, 3);
  Tensor x = reference::random_tensor({1, 4}, -3, 3, DType::Float64, 4);
  Tensor out = gelu_backward(g, x, false);
  ASSERT_EQ(out.shape(), (Shape{3, 4}));
  ASSERT_EQ(out.dtype(), DType::Float64);
  std::vector<double> ref = reference::broadcast_reference(
      g, x, [](double gv, double xv) { return static_cast<double>(gv * gelu_derivative_reference(xv, false)); });
  std::vector<double> got = values(out);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-15 * (1 + std::fabs(ref[i]))) << i;
  // A transposed gradient and a broadcast scalar input.
  Tensor gt = reference::random_tensor({4, 3}, -2, 2, DType::Float32, 5).t();
  std::vector<double> tanh_got = values(gelu_backward(gt, full({1}, -1.25f), true));
  std::vector<double> gv = values(gt);
  for (size_t i = 0; i < gv.size(); ++i) {
    double ref_i = static_cast<double>(gv[i] * gelu_derivative_reference(-1.25, true));
    EXPECT_NEAR(tanh_got[i], ref_i, 2e-7 * std::fabs(ref_i)) << i;
  }
}

TEST(GeluBackward, RejectsNonFloatingAndMismatchedInputs) {
  expect_error([] { gelu_backward(from_vector<int32_t>({1}), from_vector<int32_t>({1})); },
               "gelu_backward: expected floating tensors, got int32 and int32");
  expect_error([] { gelu_backward(from_vector<bool>({true}), from_vector<bool>({true}), true); },
               "gelu_backward: expected floating tensors, got bool and bool");
  expect_error([] { gelu_backward(full({2}, 1.0f), full({3}, 1.0f)); },
               "gelu_backward: shapes [2] and [3] cannot be broadcast");
}

}  // namespace
}  // namespace kiln
