// Elementwise ops against float64 / hand-computed references: every op,
// broadcasting, strided inputs and dtypes. In-place ops, errors, allclose
// and threading are in elementwise_inplace_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "tensor/ops.h"
#include "tests/tensor/elementwise_reference.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

using reference::broadcast_reference;
using reference::expect_close_ulps;
using reference::random_tensor;
using reference::round_to_float;
using reference::values;

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> reference;
};

std::vector<BinaryCase> float_binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double x, double y) { return x + y; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double x, double y) { return x - y; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double x, double y) { return x / y; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }},
  };
}

TEST(Elementwise, BinaryFloat32MatchesFloat64ReferenceExactly) {
  // 1037 elements: whole vectors plus a tail, on one thread and the SIMD path.
  Tensor a = random_tensor({1037}, -10, 10, DType::Float32, 1);
  Tensor b = random_tensor({1037}, 0.5, 10, DType::Float32, 2);
  for (const BinaryCase& c : float_binary_cases()) {
    std::vector<double> ref = round_to_float(broadcast_reference(a, b, c.reference));
    EXPECT_EQ(values(c.op(a, b)), ref) << c.name << " contiguous";
    // A 0-dim operand on either side takes the broadcast-scalar paths.
    Tensor s = full({}, 3.25f);
    EXPECT_EQ(values(c.op(a, s)), round_to_float(broadcast_reference(a, s, c.reference))) << c.name << " scalar b";
    EXPECT_EQ(values(c.op(s, b)), round_to_float(broadcast_reference(s, b, c.reference))) << c.name << " scalar a";
  }
}

TEST(Elementwise, BinaryBroadcastsShapes) {
  Tensor col = random_tensor({3, 1}, -5, 5, DType::Float32, 3);
  Tensor row = random_tensor({1, 4}, 1, 5, DType::Float32, 4);
  Tensor cube = random_tensor({2, 3, 4}, -5, 5, DType::Float64, 5);
  Tensor vec = random_tensor({4}, 1, 5, DType::Float64, 6);
  for (const BinaryCase& c : float_binary_cases()) {
    Tensor r = c.op(col, row);
    EXPECT_EQ(r.shape(), (Shape{3, 4}));
    EXPECT_EQ(values(r), round_to_float(broadcast_reference(col, row, c.reference))) << c.name;
    Tensor r3 = c.op(cube, vec);
    EXPECT_EQ(r3.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(values(r3), broadcast_reference(cube, vec, c.reference)) << c.name;
    EXPECT_EQ(values(c.op(vec, cube)), broadcast_reference(vec, cube, c.reference)) << c.name << " swapped";
  }
  EXPECT_EQ(add(zeros({0, 3}), ones({3})).shape(), (Shape{0, 3}));
}

TEST(Elementwise, BinaryStridedInputsMatchContiguous) {
  // Transposed and step-2 sliced views go through the general strided loop.
  Tensor base = random_tensor({6, 10}, -4, 4, DType::Float32, 7);
  Tensor other = random_tensor({10, 6}, 1, 4, DType::Float32, 8);
  Tensor sliced = base.slice(1, 0, 10, 2);       // (6, 5), strides (10, 2)
  Tensor transposed = other.t().slice(1, 1, 6);  // (6, 5), strides (1, 6)
  for (const BinaryCase& c : float_binary_cases()) {
    Tensor got = c.op(sliced, transposed);
    Tensor expected = c.op(sliced.contiguous(), transposed.contiguous());
    EXPECT_EQ(values(got), values(expected)) << c.name;
    EXPECT_EQ(values(got), round_to_float(broadcast_reference(sliced, transposed, c.reference))) << c.name;
  }
}

TEST(Elementwise, BinaryLowPrecisionFloatsComputeInFloat) {
  for (DType d : {DType::Float16, DType::BFloat16}) {
    Tensor a = random_tensor({77}, -8, 8, d, 9);
    Tensor b = random_tensor({77}, 0.5, 8, d, 10);
    for (const BinaryCase& c : float_binary_cases()) {
      Tensor got = c.op(a, b);
      EXPECT_EQ(got.dtype(), d);
      // Reference: the exact op in float64, rounded to float (what the
      // kernel computes), then to the 16-bit type.
      std::vector<double> ref = round_to_float(broadcast_reference(a, b, c.reference));
      EXPECT_EQ(values(got), values(from_vector<double>(ref).to(DType::Float32).to(d))) << c.name << " " << d;
    }
  }
}

TEST(Elementwise, IntegerArithmeticWrapsAndStaysExact) {
  int32_t big = std::numeric_limits<int32_t>::max();
  Tensor a = from_vector<int32_t>({big, -7, 12345, std::numeric_limits<int32_t>::min()});
  Tensor b = from_vector<int32_t>({1, 3, -100, 1});
  EXPECT_EQ(add(a, b).at<int32_t>({0}), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(sub(a, b).at<int32_t>({3}), big);
  EXPECT_EQ(mul(a, b).at<int32_t>({2}), -1234500);
  EXPECT_EQ(maximum(a, b).at<int32_t>({1}), 3);
  EXPECT_EQ(minimum(a, b).at<int32_t>({2}), -100);
  Tensor c = from_vector<int64_t>({int64_t{1} << 40, -3});
  EXPECT_EQ(mul(c, 1024).at<int64_t>({0}), int64_t{1} << 50);
  EXPECT_EQ(add(c, c, 3).at<int64_t>({1}), -12);  // a + 3a
  EXPECT_EQ(sub(c, c, 2).at<int64_t>({1}), 3);    // a - 2a
  Tensor u = from_vector<uint8_t>({250, 3});
  EXPECT_EQ(add(u, 10).at<int>({0}), 4);  // uint8 wraps
}

TEST(Elementwise, AddSubWithAlpha) {
  Tensor a = from_vector<float>({1, 2, 3});
  Tensor b = from_vector<float>({10, 20, 30});
  EXPECT_EQ(values(add(a, b, 0.5)), (std::vector<double>{6, 12, 18}));
  EXPECT_EQ(values(sub(a, b, 2)), (std::vector<double>{-19, -38, -57}));
  Tensor x = a.clone();
  add_(x, b, -1);
  EXPECT_EQ(values(x), (std::vector<double>{-9, -18, -27}));
  expect_error([&] { add(from_vector<int32_t>({1}), from_vector<int32_t>({1}), 0.5); },
               "add: for int32 inputs alpha must be an integer, got 0.5");
  expect_error([&] { sub(a, b, true); }, "sub: a bool alpha is only supported for bool inputs");
}

TEST(Elementwise, PowMatchesReferenceIncludingFastExponents) {
  Tensor x = random_tensor({203}, 0.1, 5, DType::Float32, 11);
  for (double e : {2.0, 3.0, 1.0, 0.5, -0.5, -1.0, -2.0, 0.0, 1.7, -2.3}) {
    std::vector<double> ref;
    for (double v : values(x)) ref.push_back(std::pow(v, e));
    // Fast paths (x*x*x, 1/sqrt) round twice: within 2 ulps of the exact power.
    expect_close_ulps(values(pow(x, e)), ref, 2, "pow exponent " + std::to_string(e));
    expect_close_ulps(values(pow(x.to(DType::Float64), e)), ref, 1e-7, "float64 pow " + std::to_string(e));
  }
  Tensor y = random_tensor({203}, -2, 2, DType::Float32, 12);
  expect_close_ulps(values(pow(x, y)), broadcast_reference(x, y, [](double u, double v) { return std::pow(u, v); }), 2,
                    "pow tensor");
  Tensor base = from_vector<int64_t>({2, -3, 1, -1, 5, 0});
  Tensor expo = from_vector<int64_t>({10, 3, -4, -3, -1, 0});
  // Negative integer exponents give 1 / base truncated toward zero, as torch.
  EXPECT_EQ(values(pow(base, expo)), (std::vector<double>{1024, -27, 1, -1, 0, 1}));
  EXPECT_EQ(pow(from_vector<int32_t>({3}), 21).item<int32_t>(), static_cast<int32_t>(10460353203LL & 0xffffffff));
  EXPECT_TRUE(std::isnan(pow(from_vector<float>({-8}), 1.0 / 3).item<float>()));
  expect_error([&] { pow(from_vector<int32_t>({2}), -2); },
               "pow: integers to negative integer powers are not allowed (int32 base, exponent -2)");
  expect_error([&] { pow(from_vector<bool>({true}), from_vector<bool>({true})); },
               "pow: not supported for bool tensors");
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> reference;
  double ulps;  // float32 tolerance against the float64 reference
  // Extra ulps per unit of this input-dependent factor, for ops that are
  // ill-conditioned in float (below).
  std::function<double(double)> conditioning = [](double) { return 0.0; };
};

double gelu_reference(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// x * sigmoid(2u), the same function as 0.5x(1 + tanh(u)) but without the
// float64 cancellation for x below about -5.
double gelu_tanh_reference(double x) {
  double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1 + std::exp(-2 * u));
}

std::vector<UnaryCase> float_unary_cases() {
  return {
      {"neg", [](const Tensor& t) { return neg(t); }, [](double x) { return -x; }, 0},
      {"abs", [](const Tensor& t) { return abs(t); }, [](double x) { return std::fabs(x); }, 0},
      {"relu", [](const Tensor& t) { return relu(t); }, [](double x) { return x < 0 ? 0.0 : x; }, 0},
      {"sqrt", [](const Tensor& t) { return sqrt(abs(t)); }, [](double x) { return std::sqrt(std::fabs(x)); }, 0.5},
      {"rsqrt", [](const Tensor& t) { return rsqrt(abs(t)); }, [](double x) { return 1 / std::sqrt(std::fabs(x)); },
       1.5},
      {"exp", [](const Tensor& t) { return exp(t); }, [](double x) { return std::exp(x); }, 2},
      {"log", [](const Tensor& t) { return log(abs(t)); }, [](double x) { return std::log(std::fabs(x)); }, 2.5},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, [](double x) { return 1 / (1 + std::exp(-x)); }, 3},
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double x) { return std::tanh(x); }, 3},
      {"gelu", [](const Tensor& t) { return gelu(t); }, gelu_reference, 6},
      // gelu_tanh(x) = x * sigmoid(2u) with u = 0.798(x + 0.045x^3): for
      // negative x the float rounding of u (relative ~2 ulps) is multiplied
      // by |2u| in e^(2u), as in any float implementation (torch's included).
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, true); }, gelu_tanh_reference, 4,
       [](double x) { return x < 0 ? 3 * 2 * 0.7978845608 * std::fabs(x + 0.044715 * x * x * x) : 0.0; }},
  };
}

// Inputs with the edge cases each op must get right: zeros of both signs,
// tiny and huge values, infinities and NaN, followed by a random spread.
Tensor unary_inputs(double spread) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1e-30f,
                          -1e-30f,
                          1e-7f,
                          -1e-7f,
                          0.5f,
                          -0.5f,
                          1.0f,
                          -1.0f,
                          9.5f,
                          -9.5f,
                          20.0f,
                          -20.0f,
                          88.0f,
                          -88.0f,
                          90.0f,
                          -90.0f,
                          -104.5f,
                          1e30f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  // 1001 more: 1024 in all, so the tensor views as (2, 512).
  std::vector<double> rest = values(random_tensor({1001}, -spread, spread, DType::Float64, 13));
  for (double x : rest) v.push_back(static_cast<float>(x));
  return from_vector<float>(v);
}

TEST(Elementwise, UnaryFloat32MatchesFloat64Reference) {
  Tensor x = unary_inputs(12);
  // A (2, n/2) transposed copy has the same values with inner stride 2: the
  // scalar reference loop instead of the vector kernel.
  Tensor strided = x.view({2, -1}).t().contiguous().t();  // (2, 512), strides (1, 2)
  ASSERT_FALSE(strided.is_contiguous());
  for (const UnaryCase& c : float_unary_cases()) {
    std::vector<double> ref, ulps;
    for (double v : values(x)) {
      ref.push_back(c.reference(v));
      ulps.push_back(c.ulps + c.conditioning(v));
    }
    expect_close_ulps(values(c.op(x)), ref, ulps, std::string(c.name) + " contiguous");
    // Same values in the same order, so the same references.
    expect_close_ulps(values(c.op(strided)), ref, ulps, std::string(c.name) + " strided");
  }
}

TEST(Elementwise, UnaryOtherFloatTypes) {
  Tensor x64 = random_tensor({301}, -6, 6, DType::Float64, 14);
  for (const UnaryCase& c : float_unary_cases()) {
    std::vector<double> ref;
    for (double v : values(x64)) ref.push_back(c.reference(v));
    std::vector<double> got = values(c.op(x64));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-13 * (1 + std::fabs(ref[i]))) << c.name;
    for (DType d : {DType::Float16, DType::BFloat16}) {
      Tensor x = x64.to(d);
      Tensor r = c.op(x);
      EXPECT_EQ(r.dtype(), d);
      // Computed in float then rounded once to d: within half a d-ulp plus the float error.
      double eps = d == DType::Float16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
      std::vector<double> xr = values(x), gr = values(r);
      for (size_t i = 0; i < gr.size(); ++i) {
        double expect = c.reference(xr[i]);
        EXPECT_NEAR(gr[i], expect, eps * std::fabs(expect) + 1e-7) << c.name << " " << d << " x=" << xr[i];
      }
    }
  }
}

TEST(Elementwise, IntegerUnaryOps) {
  int32_t lowest = std::numeric_limits<int32_t>::min();
  Tensor i = from_vector<int32_t>({-5, 0, 7, lowest});
  EXPECT_EQ(values(neg(i)), (std::vector<double>{5, 0, -7, static_cast<double>(lowest)}));  // -INT_MIN wraps
  EXPECT_EQ(values(abs(i)), (std::vector<double>{5, 0, 7, static_cast<double>(lowest)}));
  EXPECT_EQ(values(relu(i)), (std::vector<double>{0, 0, 7, 0}));
  EXPECT_EQ(values(neg(from_vector<uint8_t>({1, 0}))), (std::vector<double>{255, 0}));
  EXPECT_EQ(values(-from_vector<int8_t>({-128, 3})), (std::vector<double>{-128, -3}));
  Tensor f = exp(from_vector<int64_t>({0, 1}));
  EXPECT_EQ(f.at<float>({1}), std::exp(1.0f));
}

TEST(Elementwise, ComparisonsGiveBool) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = from_vector<float>({1, 2, 3, nan});
  Tensor b = from_vector<float>({2, 2, 2, nan});
  auto bools = [](const Tensor& t) {
    EXPECT_EQ(t.dtype(), DType::Bool);
    return values(t);
  };
  EXPECT_EQ(bools(eq(a, b)), (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(bools(ne(a, b)), (std::vector<double>{1, 0, 1, 1}));  // NaN != NaN
  EXPECT_EQ(bools(lt(a, b)), (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(bools(le(a, b)), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(bools(gt(a, b)), (std::vector<double>{0, 0, 1, 0}));
  EXPECT_EQ(bools(ge(a, b)), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(bools(gt(a, 1.5)), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(bools(le(a, 2)), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(bools(eq(a, 3)), (std::vector<double>{0, 0, 1, 0}));
  EXPECT_EQ(bools(ne(a, 3)), (std::vector<double>{1, 1, 0, 1}));
  EXPECT_EQ(bools(lt(a, 3)), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(bools(ge(a, 3)), (std::vector<double>{0, 0, 1, 0}));
  // Broadcast and mixed dtypes: an int64 column against a float32 row.
  Tensor col = from_vector<int64_t>({1, 2}, {2, 1});
  Tensor row = from_vector<float>({0.5f, 1.0f, 1.5f}, {1, 3});
  Tensor r = lt(col, row);
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(bools(r), (std::vector<double>{0, 0, 1, 0, 0, 0}));
  // int64 values above 2^24 compare exactly in int64, not through float.
  Tensor big = from_vector<int64_t>({(1 << 24) + 1, 1}, {2});
  EXPECT_FALSE(eq(big, int64_t{1} << 24).at<bool>({0}));
}

TEST(Elementwise, LogicalOps) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = from_vector<float>({0, 0, 2, nan});
  Tensor b = from_vector<int32_t>({0, 5, 0, 1});
  EXPECT_EQ(values(logical_and(a, b)), (std::vector<double>{0, 0, 0, 1}));  // NaN is true
  EXPECT_EQ(values(logical_or(a, b)), (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(values(logical_xor(a, b)), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(values(logical_not(a)), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(logical_xor(a, b).dtype(), DType::Bool);
  EXPECT_EQ(values(logical_not(from_vector<bool>({true, false}))), (std::vector<double>{0, 1}));
}

TEST(Elementwise, WhereBroadcastsAllThree) {
  Tensor cond = from_vector<bool>({true, false, true}, {3, 1});
  Tensor a = from_vector<float>({1, 2, 3, 4}, {1, 4});
  Tensor r = where(cond, a, -1.5);
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  EXPECT_EQ(values(r), (std::vector<double>{1, 2, 3, 4, -1.5, -1.5, -1.5, -1.5, 1, 2, 3, 4}));
  // Strided operands and a float64 result from float32 + float64.
  Tensor x = random_tensor({4, 3}, -1, 1, DType::Float32, 15).t();
  Tensor y = random_tensor({3, 4}, -1, 1, DType::Float64, 16);
  Tensor c = gt(x, 0);
  Tensor w = where(c, x, y);
  EXPECT_EQ(w.dtype(), DType::Float64);
  std::vector<double> vx = values(x), vy = values(y), vc = values(c), vw = values(w);
  for (size_t i = 0; i < vw.size(); ++i) EXPECT_EQ(vw[i], vc[i] ? vx[i] : vy[i]);
  expect_error([&] { where(from_vector<float>({1}), a, a); },
               "where: expected the condition to be a bool tensor, got float32");
  expect_error(
      [&] {
        where(from_vector<bool>({true, false}), a, a);
      },
      "where: shapes [2] and [1, 4] cannot be broadcast");
}

TEST(Elementwise, ReluBackwardPassesGradientWhereTheOutputIsPositive) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // Long enough for the vector loop and its tail; every case in each dtype.
  std::vector<double> out_values, grad_values, expected;
  const std::vector<double> outs = {2.0, 0.0, -0.0, -3.0, nan, 1e-30}, grads = {1.5, -2.0, nan, inf, 7.0, -inf};
  for (int rep = 0; rep < 5; ++rep) {
    for (size_t i = 0; i < outs.size(); ++i) {
      out_values.push_back(outs[i]);
      grad_values.push_back(grads[(i + rep) % grads.size()]);
      expected.push_back(outs[i] > 0 ? grad_values.back() : 0.0);
    }
  }
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    const int64_t n = static_cast<int64_t>(out_values.size());
    Tensor r = relu_backward(from_vector<double>(grad_values, {n}).to(dtype), from_vector<double>(out_values, {n}).to(dtype));
    ASSERT_EQ(r.dtype(), dtype);
    std::vector<double> got = values(r);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(expected[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << dtype << " at " << i;
      } else {
        EXPECT_EQ(got[i], static_cast<double>(from_vector<double>({expected[i]}, {1}).to(dtype).to(DType::Float64).item<double>()))
            << dtype << " at " << i;
      }
    }
  }
  // Broadcast output (a scalar), strided gradient.
  Tensor g = random_tensor({3, 4}, -1, 1, DType::Float32, 17).t();
  EXPECT_EQ(values(relu_backward(g, full({1}, 2.0))), values(g));
  EXPECT_EQ(values(relu_backward(g, full({1}, -2.0))), std::vector<double>(12, 0.0));
  expect_error([&] { relu_backward(from_vector<int32_t>({1}), from_vector<int32_t>({1})); },
               "relu_backward: expected floating tensors, got int32 and int32");
}

TEST(Elementwise, ClampBounds) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({-3, -1, 0, 2, 5, nan});
  EXPECT_EQ(values(clamp(x, -1.5, 2.5)).at(0), -1.5);
  std::vector<double> both = values(clamp(x, -1.5, 2.5));
  EXPECT_EQ(std::vector<double>(both.begin(), both.end() - 1), (std::vector<double>{-1.5, -1, 0, 2, 2.5}));
  EXPECT_TRUE(std::isnan(both.back()));  // NaN passes through
  std::vector<double> lo = values(clamp(x, 0, std::nullopt));
  EXPECT_EQ(std::vector<double>(lo.begin(), lo.end() - 1), (std::vector<double>{0, 0, 0, 2, 5}));
  std::vector<double> hi = values(clamp(x, std::nullopt, 0));
  EXPECT_EQ(std::vector<double>(hi.begin(), hi.end() - 1), (std::vector<double>{-3, -1, 0, 0, 0}));
  // min > max gives max everywhere, as torch.
  std::vector<double> crossed = values(clamp(x.narrow(0, 0, 5), 3, 1));
  EXPECT_EQ(crossed, (std::vector<double>(5, 1.0)));
  Tensor i = from_vector<int64_t>({-7, 0, 7});
  EXPECT_EQ(values(clamp(i, -2, 2)), (std::vector<double>{-2, 0, 2}));
  Tensor t = random_tensor({5, 4}, -2, 2, DType::Float32, 17).t();
  std::vector<double> got = values(clamp(t, -0.5, 0.5));
  std::vector<double> in = values(t);
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], std::clamp(in[k], -0.5, 0.5));
  // A NaN bound gives NaN everywhere (the strided loop's case, not the
  // plain compares of the contiguous one).
  for (double v : values(clamp(x, nan, 1))) EXPECT_TRUE(std::isnan(v));
  for (double v : values(clamp(x, std::nullopt, nan))) EXPECT_TRUE(std::isnan(v));
  // A long uint8 run, as a quantized ReLU clamps it, each bound alone and both.
  std::vector<uint8_t> bytes(1000);
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(k * 37 % 256);
  Tensor u = from_vector<uint8_t>(bytes);
  std::vector<double> u_lo = values(clamp(u, 100, std::nullopt)), u_both = values(clamp(u, 30, 200));
  for (size_t k = 0; k < bytes.size(); ++k) {
    EXPECT_EQ(u_lo[k], std::max<double>(bytes[k], 100));
    EXPECT_EQ(u_both[k], std::clamp<double>(bytes[k], 30, 200));
  }
  expect_error([&] { clamp(x, std::nullopt, std::nullopt); }, "clamp: at least one of min and max must be given");
}

}  // namespace
}  // namespace kiln
