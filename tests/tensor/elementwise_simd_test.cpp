// The vectorised float32 kernels (tensor/cpu/elementwise_simd.h), called
// directly at every level this CPU supports: their accuracy over dense
// sweeps against float64, and agreement with the scalar reference loops.
#include "tensor/cpu/elementwise_simd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "tensor/ops.h"
#include "tensor/cpu/cpu_features.h"
#include "tests/tensor/elementwise_reference.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

struct Level {
  const char* name;
  cpu::UnaryF32Kernel unary;
  cpu::BinaryF32Kernel binary;
};

// The vector levels this CPU can run (AVX-512 only where present).
std::vector<Level> levels() {
  std::vector<Level> out;
  cpu::SimdLevel level = cpu::simd_level();
  if (level >= cpu::SimdLevel::Avx2) out.push_back({"avx2", cpu::unary_f32_avx2, cpu::binary_f32_avx2});
  if (level >= cpu::SimdLevel::Avx512) out.push_back({"avx512", cpu::unary_f32_avx512, cpu::binary_f32_avx512});
  return out;
}

// Distance in float32 ulps at the reference (subnormal spacing below FLT_MIN).
double ulp_error(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(static_cast<float>(ref))) return static_cast<float>(ref) == got ? 0 : INFINITY;
  double a = std::fabs(ref);
  int e;
  std::frexp(a, &e);
  double ulp = a < FLT_MIN ? std::ldexp(1.0, -149) : std::ldexp(1.0, e - 24);
  return std::fabs(got - ref) / ulp;
}

struct Accuracy {
  UnaryOp op;
  const char* name;
  double lo, hi;
  double max_ulps;
  double (*reference)(double);
};

double sigmoid_reference(double x) { return 1 / (1 + std::exp(-x)); }
double exp_reference(double x) { return std::exp(x); }
double tanh_reference(double x) { return std::tanh(x); }
double sqrt_reference(double x) { return std::sqrt(x); }
double rsqrt_reference(double x) { return 1 / std::sqrt(x); }
double log_reference(double x) { return std::log(x); }
double gelu_reference(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_reference(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

TEST(ElementwiseSimd, UnaryAccuracyOverDenseSweeps) {
  if (levels().empty()) GTEST_SKIP() << "no vector level on this CPU";
  // The bounds are the measured maxima rounded up; they fail if a
  // coefficient or the range reduction is broken (errors would be huge).
  std::vector<Accuracy> cases = {
      {UnaryOp::Exp, "exp", -104, 89, 1.0, exp_reference},
      {UnaryOp::Sigmoid, "sigmoid", -110, 110, 2.5, sigmoid_reference},
      {UnaryOp::Tanh, "tanh", -12, 12, 2.5, tanh_reference},
      {UnaryOp::Gelu, "gelu", -16, 12, 6, gelu_reference},
      // From -3 only: below, e^(2u) amplifies the float rounding of u by
      // |2u| (the scalar-path comparison below bounds that part).
      {UnaryOp::GeluTanh, "gelu_tanh", -3, 12, 14, gelu_tanh_reference},
      {UnaryOp::Log, "log", 0, 4, 2.5, log_reference},
      {UnaryOp::Log, "log", 0, 1e30, 2, log_reference},
      {UnaryOp::Sqrt, "sqrt", 0, 1e6, 0.5, sqrt_reference},
      {UnaryOp::Rsqrt, "rsqrt", 1e-6, 1e6, 1.5, rsqrt_reference},  // 1 / sqrt: two roundings
  };
  for (const Level& level : levels()) {
    for (const Accuracy& c : cases) {
      std::vector<float> x = reference::sweep(c.lo, c.hi, 2000003);
      // A small tanh range too, where expm1's relative precision matters.
      if (c.op == UnaryOp::Tanh) {
        for (float v : reference::sweep(-0.7, 0.7, 200003)) x.push_back(v);
      }
      std::vector<float> y(x.size());
      ASSERT_TRUE(level.unary(c.op, y.data(), x.data(), static_cast<int64_t>(x.size())));
      double worst = 0;
      float worst_x = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if ((c.op == UnaryOp::Sqrt || c.op == UnaryOp::Rsqrt || c.op == UnaryOp::Log) && x[i] < 0) continue;
        double err = ulp_error(y[i], c.reference(x[i]));
        if (err > worst) {
          worst = err;
          worst_x = x[i];
        }
      }
      EXPECT_LE(worst, c.max_ulps) << level.name << " " << c.name << " worst at x=" << worst_x;
      std::cout << "[ accuracy ] " << level.name << " " << c.name << ": max error " << worst << " ulp at x=" << worst_x
                << "\n";
    }
  }
}

// |got - ref| in float32 ulps of `scale` (>= |ref|): the spacing that a
// float evaluation of a sum of terms of that size cannot beat.
double ulp_error_at(float got, double ref, double scale) {
  if (std::isnan(ref) || std::isinf(static_cast<float>(ref))) return ulp_error(got, ref);
  return std::fabs(got - ref) / reference::float_ulp(scale);
}

// g * gelu'(x), both approximations, against the long double formulas over
// a dense sweep of x and gradients from 1e-30 to 1e20: the scaled products
// keep subnormal results (x below about -13.3, or -9.5 for tanh) and the
// products of large gradients with tiny derivatives to a few ulps. The
// exact form is within 6 ulps of its larger term (4.9 measured), the tanh
// form within 4 (3.2) plus 3|2u| for negative x: the float rounding of
// 2u = 2k(x + c x^3), which e^(2u) multiplies by |2u| as in the forward
// (vec::gelu_tanh); the function's own condition number there is 3|2u|, so
// that is the error of perturbing x by under an ulp.
TEST(ElementwiseSimd, GeluBackwardAccuracyOverDenseSweeps) {
  if (levels().empty()) GTEST_SKIP() << "no vector level on this CPU";
  std::vector<float> x = reference::sweep(-20, 20, 2000003);
  for (float v : reference::sweep(-1, 1, 200003)) x.push_back(v);  // around 0 and the root near -0.75
  for (const Level& level : levels()) {
    for (bool tanh_form : {false, true}) {
      BinaryOp op = tanh_form ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward;
      for (float g : {1.0f, -2.5f, 1e20f, -1e-30f}) {
        std::vector<float> out(x.size());
        ASSERT_TRUE(level.binary(op, out.data(), &g, 0, x.data(), 1, static_cast<int64_t>(x.size())));
        double worst = 0;
        float worst_x = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          long double terms = 0;
          long double d = reference::gelu_derivative_reference(x[i], tanh_form, &terms);
          double ref = static_cast<double>(g * d);
          double allowed = tanh_form ? 4 : 6;
          if (tanh_form && x[i] < 0) {
            double xv = x[i];
            allowed += 3 * 2 * 0.798 * std::fabs(xv + 0.044715 * xv * xv * xv);
          }
          double err = ulp_error_at(out[i], ref, std::max<double>(std::fabs(ref), std::fabs(g * terms)));
          EXPECT_LE(err, allowed) << level.name << (tanh_form ? " gelu_tanh" : " gelu") << " g=" << g
                                  << " x=" << x[i] << " got " << out[i] << " reference " << ref;
          if (err > allowed) break;
          if (err / allowed > worst) {
            worst = err / allowed;
            worst_x = x[i];
          }
        }
        std::cout << "[ accuracy ] " << level.name << (tanh_form ? " gelu_tanh_backward" : " gelu_backward")
                  << " g=" << g << ": max error " << worst << " of the bound at x=" << worst_x << "\n";
      }
    }
  }
}

TEST(ElementwiseSimd, GeluBackwardSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const Level& level : levels()) {
    for (BinaryOp op : {BinaryOp::GeluBackward, BinaryOp::GeluTanhBackward}) {
      // gelu'(+-0) = 1/2; +-inf and NaN give NaN (torch's inf * 0); far out
      // the derivative is 1 and (a negative) 0; a NaN gradient stays NaN.
      float x[9] = {0.0f, -0.0f, inf, -inf, nan, 1e30f, -1e30f, 1e-40f, 3.0f};
      float g[9] = {2.0f, 2.0f, 1.0f, 1.0f, 1.0f, 3.0f, 3.0f, 2.0f, nan};
      float out[9];
      ASSERT_TRUE(level.binary(op, out, g, 1, x, 1, 9));
      std::string what = std::string(level.name) + (op == BinaryOp::GeluBackward ? " gelu" : " gelu_tanh");
      EXPECT_EQ(out[0], 1.0f) << what;
      EXPECT_EQ(out[1], 1.0f) << what;
      for (int i : {2, 3, 4, 8}) EXPECT_TRUE(std::isnan(out[i])) << what << " at " << i;
      EXPECT_EQ(out[5], 3.0f) << what;
      EXPECT_EQ(out[6], 0.0f) << what;
      EXPECT_EQ(out[7], 1.0f) << what;
    }
  }
}

TEST(ElementwiseSimd, EveryLengthAndTailMatchesTheFullVectorResult) {
  // Lengths 0..40 cover empty runs, runs shorter than one vector, and every
  // tail length; each element must equal the value computed in a long run.
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-6, 6);
  std::vector<float> x(64), full(64), part(64), b(64);
  for (float& v : x) v = dist(gen);
  for (float& v : b) v = dist(gen);
  for (const Level& level : levels()) {
    for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Sigmoid, UnaryOp::Tanh, UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Relu,
                       UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Log}) {
      ASSERT_TRUE(level.unary(op, full.data(), x.data(), 64));
      for (int64_t n = 0; n <= 40; ++n) {
        std::fill(part.begin(), part.end(), -12345.0f);
        ASSERT_TRUE(level.unary(op, part.data(), x.data(), n));
        // Bit equality, so that NaN (sqrt of negatives) compares too.
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_EQ(std::bit_cast<uint32_t>(part[i]), std::bit_cast<uint32_t>(full[i]))
              << level.name << " op " << int(op) << " n=" << n;
        }
        EXPECT_EQ(part[n], -12345.0f) << "wrote past the end, n=" << n;
      }
    }
    // The gelu derivatives, for every length and broadcast operand, bit for
    // bit against one contiguous run over the same (materialised) values.
    for (BinaryOp op : {BinaryOp::GeluBackward, BinaryOp::GeluTanhBackward}) {
      for (int64_t n = 0; n <= 40; ++n) {
        for (int steps = 0; steps < 4; ++steps) {
          int64_t a_step = steps & 1, b_step = steps >> 1;
          std::vector<float> a_full(64), b_full(64);
          for (int64_t i = 0; i < 64; ++i) a_full[i] = b[i * a_step], b_full[i] = x[i * b_step];
          ASSERT_TRUE(level.binary(op, full.data(), a_full.data(), 1, b_full.data(), 1, 64));
          std::fill(part.begin(), part.end(), -12345.0f);
          ASSERT_TRUE(level.binary(op, part.data(), b.data(), a_step, x.data(), b_step, n));
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(std::bit_cast<uint32_t>(part[i]), std::bit_cast<uint32_t>(full[i]))
                << level.name << " op " << int(op) << " n=" << n << " steps " << steps;
          }
          EXPECT_EQ(part[n], -12345.0f) << "wrote past the end, n=" << n;
        }
      }
    }
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum,
                        BinaryOp::Minimum, BinaryOp::ReluBackward}) {
      for (int64_t n : {1, 7, 8, 9, 17, 33}) {
        for (int steps = 0; steps < 4; ++steps) {
          int64_t a_step = steps & 1, b_step = steps >> 1;
          std::fill(part.begin(), part.end(), -12345.0f);
          ASSERT_TRUE(level.binary(op, part.data(), x.data(), a_step, b.data(), b_step, n));
          for (int64_t i = 0; i < n; ++i) {
            float u = x[i * a_step], v = b[i * b_step];
            float expect = op == BinaryOp::Add       ? u + v
                           : op == BinaryOp::Sub     ? u - v
                           : op == BinaryOp::Mul     ? u * v
                           : op == BinaryOp::Div     ? u / v
                           : op == BinaryOp::Maximum ? std::max(u, v)
                           : op == BinaryOp::Minimum ? std::min(u, v)
                                                     : (v > 0 ? u : 0.0f);
            EXPECT_EQ(part[i], expect) << level.name << " op " << int(op) << " n=" << n << " steps " << steps;
          }
          EXPECT_EQ(part[n], -12345.0f);
        }
      }
    }
  }
}

TEST(ElementwiseSimd, NanAndSignedZeroSemantics) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Level& level : levels()) {
    float a[4] = {nan, 1.0f, nan, -0.0f}, b[4] = {1.0f, nan, nan, 0.0f}, out[4];
    // maximum/minimum propagate NaN from either side, as torch.
    for (BinaryOp op : {BinaryOp::Maximum, BinaryOp::Minimum}) {
      ASSERT_TRUE(level.binary(op, out, a, 1, b, 1, 4));
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(out[i])) << level.name << " op " << int(op) << " at " << i;
    }
    float x[4] = {nan, -0.0f, -3.0f, 2.0f};
    ASSERT_TRUE(level.unary(UnaryOp::Relu, out, x, 4));
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[2], 0.0f);
    EXPECT_EQ(out[3], 2.0f);
    ASSERT_TRUE(level.unary(UnaryOp::Abs, out, x, 4));
    EXPECT_FALSE(std::signbit(out[1]));
    ASSERT_TRUE(level.unary(UnaryOp::Tanh, out, x, 4));
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_TRUE(std::signbit(out[1]));  // tanh(-0) = -0
    // Ops without a vector form report it, so the scalar loop runs.
    EXPECT_FALSE(level.unary(UnaryOp::LogicalNot, out, x, 4));
    EXPECT_FALSE(level.binary(BinaryOp::Pow, out, a, 1, b, 1, 4));
  }
}

TEST(ElementwiseSimd, VectorAndScalarPathsOfPublicOpsAgree) {
  // The same values contiguous (vector kernel) and with inner stride 2
  // (scalar loop); the two use different exp/tanh implementations, so they
  // agree to a few ulps, and exactly for the IEEE operations.
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-9, 9);
  std::vector<float> v(4096);
  for (float& x : v) x = dist(gen);
  Tensor x = from_vector<float>(v);
  Tensor strided = x.view({2, -1}).t().contiguous().t();
  auto as_vector = [](const Tensor& t) {
    Tensor c = t.contiguous();
    return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
  };
  struct Op {
    const char* name;
    Tensor (*fn)(const Tensor&);
    double ulps;
  };
  auto gelu_exact = [](const Tensor& t) { return gelu(t); };
  for (Op op : {Op{"exp", exp, 2}, Op{"sigmoid", sigmoid, 4}, Op{"tanh", tanh, 4}, Op{"gelu", gelu_exact, 6},
                Op{"relu", relu, 0}, Op{"neg", neg, 0}, Op{"abs", abs, 0}}) {
    std::vector<float> fast = as_vector(op.fn(x)), slow = as_vector(op.fn(strided));
    for (size_t i = 0; i < fast.size(); ++i) {
      EXPECT_LE(ulp_error(fast[i], slow[i]), op.ulps) << op.name << " x=" << v[i];
    }
  }
  // gelu's derivatives: the vector kernels against the scalar loop, which
  // computes in double and rounds the product once.
  Tensor g = from_vector<float>(std::vector<float>(v.rbegin(), v.rend()));
  Tensor g_strided = g.view({2, -1}).t().contiguous().t();
  for (bool tanh_form : {false, true}) {
    std::vector<float> fast = as_vector(gelu_backward(g, x, tanh_form));
    std::vector<float> slow = as_vector(gelu_backward(g_strided, strided, tanh_form));
    for (size_t i = 0; i < fast.size(); ++i) {
      double xv = v[i];
      long double terms = 0;
      reference::gelu_derivative_reference(xv, tanh_form, &terms);
      double scale = std::max<double>(std::fabs(slow[i]), std::fabs(static_cast<double>(v[v.size() - 1 - i]) * terms));
      double conditioning = tanh_form && xv < 0 ? 3 * 2 * 0.798 * std::fabs(xv + 0.044715 * xv * xv * xv) : 0;
      EXPECT_LE(ulp_error_at(fast[i], slow[i], scale), (tanh_form ? 4.5 : 6.5) + conditioning)
          << (tanh_form ? "gelu_tanh" : "gelu") << " backward x=" << xv;
    }
  }
  std::vector<float> fast = as_vector(gelu(x, true)), slow = as_vector(gelu(strided, true));
  for (size_t i = 0; i < fast.size(); ++i) {
    // The vector kernel forms u = 0.798(x + 0.045x^3) in float, and e^(2u)
    // multiplies its ~3 ulp relative error by |2u| for negative x; the
    // scalar loop forms u in double.
    double x3 = double(v[i]) * v[i] * v[i];
    double conditioning = v[i] < 0 ? 3 * 2 * 0.798 * std::fabs(v[i] + 0.044715 * x3) : 0;
    EXPECT_LE(ulp_error(fast[i], slow[i]), 6 + conditioning) << "gelu_tanh x=" << v[i];
  }
}

}  // namespace
}  // namespace kiln
