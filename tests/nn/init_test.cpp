// nn::init: gains and fans against torch's formulas, and the distributions
// of the initialisers checked by their bounds, mean and std on large tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "autograd/ops.h"
#include "nn/init.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

using testing::expect_error;
using testing::values_of;

struct Moments {
  double mean;
  double std;
  double min;
  double max;
};

Moments moments_of(const Tensor& t) {
  std::vector<double> v = values_of(t);
  double sum = 0.0;
  for (double x : v) sum += x;
  double mean = sum / static_cast<double>(v.size());
  double squares = 0.0;
  for (double x : v) squares += (x - mean) * (x - mean);
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {mean, std::sqrt(squares / static_cast<double>(v.size() - 1)), *lo, *hi};
}

// With n = 200k samples the sample mean of a distribution of std s is within
// 5 s / sqrt(n) ~ 0.011 s of the truth (5 sigma) and the sample std within ~1%.
void expect_moments(const Tensor& t, double mean, double std) {
  Moments m = moments_of(t);
  double n = static_cast<double>(t.numel());
  EXPECT_NEAR(m.mean, mean, 5.0 * std / std::sqrt(n));
  EXPECT_NEAR(m.std, std, 0.01 * std);
}

TEST(Init, CalculateGainMatchesTorch) {
  for (const char* linear : {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                             "conv_transpose3d", "sigmoid"}) {
    EXPECT_EQ(init::calculate_gain(linear), 1.0) << linear;
  }
  EXPECT_DOUBLE_EQ(init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("selu"), 0.75);
  expect_error([] { init::calculate_gain("swish"); }, "calculate_gain: unsupported nonlinearity 'swish' (expected linear");
  expect_error([] { init::calculate_gain("leaky_relu", NAN); }, "calculate_gain: negative_slope nan is not a valid number");
}

TEST(Init, FansOfLinearAndConvWeights) {
  auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(kiln::empty({10, 84}));  // Linear(84, 10)
  EXPECT_EQ(fan_in, 84);
  EXPECT_EQ(fan_out, 10);
  init::Fans conv2d = init::calculate_fan_in_and_fan_out(kiln::empty({6, 3, 5, 5}));  // Conv2d(3, 6, 5)
  EXPECT_EQ(conv2d.fan_in, 75);
  EXPECT_EQ(conv2d.fan_out, 150);
  init::Fans conv1d = init::calculate_fan_in_and_fan_out(kiln::empty({4, 2, 3}));
  EXPECT_EQ(conv1d.fan_in, 6);
  EXPECT_EQ(conv1d.fan_out, 12);
  init::Fans conv3d = init::calculate_fan_in_and_fan_out(kiln::empty({8, 4, 2, 3, 5}));
  EXPECT_EQ(conv3d.fan_in, 120);
  EXPECT_EQ(conv3d.fan_out, 240);
  expect_error([] { init::calculate_fan_in_and_fan_out(kiln::empty({5})); },
               "calculate_fan_in_and_fan_out: fan in and fan out can not be computed for a tensor with fewer than "
               "2 dimensions (got shape [5])");
  expect_error([] { init::xavier_uniform_(kiln::empty({5})); }, "fewer than 2 dimensions");
}

TEST(Init, UniformAndNormal) {
  Generator gen(1);
  Tensor u = init::uniform_(kiln::empty({200000}), -3.0, 5.0, &gen);
  Moments m = moments_of(u);
  EXPECT_GE(m.min, -3.0);
  EXPECT_LT(m.max, 5.0);
  expect_moments(u, 1.0, 8.0 / std::sqrt(12.0));

  Tensor n = init::normal_(kiln::empty({200000}, DType::Float64), 2.0, 3.0, &gen);
  expect_moments(n, 2.0, 3.0);
  expect_error([] { init::uniform_(kiln::zeros({4}, DType::Int64)); },
               "uniform_: expected a floating point tensor, got int64");
}

TEST(Init, TruncNormalStaysInBoundsWithTheTruncatedMoments) {
  Generator gen(2);
  // Standard normal truncated to [-2, 2]: variance 1 - 2 * 2 * phi(2) / (Phi(2) - Phi(-2)).
  Tensor t = init::trunc_normal_(kiln::empty({200000}), 0.0, 1.0, -2.0, 2.0, &gen);
  Moments m = moments_of(t);
  EXPECT_GE(m.min, -2.0);
  EXPECT_LE(m.max, 2.0);
  EXPECT_LT(m.min, -1.99);  // the tails are reached, not cut short
  EXPECT_GT(m.max, 1.99);
  auto phi = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi); };
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)); };
  double z = cdf(2.0) - cdf(-2.0);
  expect_moments(t, 0.0, std::sqrt(1.0 - 2.0 * 2.0 * phi(2.0) / z));

  // Asymmetric: N(1, 0.5^2) on [0, 1.5], i.e. standardised bounds alpha = -2, beta = 1.
  Tensor s = init::trunc_normal_(kiln::empty({200000}, DType::Float64), 1.0, 0.5, 0.0, 1.5, &gen);
  double alpha = -2.0, beta = 1.0;
  double zs = cdf(beta) - cdf(alpha);
  double mean = 1.0 + 0.5 * (phi(alpha) - phi(beta)) / zs;
  double var = 0.25 * (1.0 + (alpha * phi(alpha) - beta * phi(beta)) / zs - std::pow((phi(alpha) - phi(beta)) / zs, 2));
  Moments ms = moments_of(s);
  EXPECT_GE(ms.min, 0.0);
  EXPECT_LE(ms.max, 1.5);
  expect_moments(s, mean, std::sqrt(var));

  expect_error([] { init::trunc_normal_(kiln::empty({2}), 0.0, 1.0, 1.0, -1.0); },
               "trunc_normal_: expected a < b, got a 1 and b -1");
}

TEST(Init, ConstantsEyeAndDirac) {
  EXPECT_EQ(values_of(init::constant_(kiln::empty({3}), 0.5)), std::vector<double>(3, 0.5));
  EXPECT_EQ(values_of(init::zeros_(kiln::ones({2}))), std::vector<double>(2, 0.0));
  EXPECT_EQ(values_of(init::ones_(kiln::zeros({2}, DType::Int32))), std::vector<double>(2, 1.0));
  EXPECT_EQ(values_of(init::eye_(kiln::empty({2, 3}))), (std::vector<double>{1, 0, 0, 0, 1, 0}));
  expect_error([] { init::eye_(kiln::empty({2, 2, 2})); }, "eye_: only tensors with 2 dimensions are supported, got shape [2, 2, 2]");

  // Conv1d weight (4, 2, 3): output c copies input c through the kernel centre.
  std::vector<double> w = values_of(init::dirac_(kiln::full({4, 2, 3}, 7.0)));
  std::vector<double> expected(24, 0.0);
  expected[0 * 6 + 0 * 3 + 1] = 1.0;
  expected[1 * 6 + 1 * 3 + 1] = 1.0;
  EXPECT_EQ(w, expected);
  // Two groups of a Conv2d weight (4, 2, 3, 3): outputs 0, 1 and 2, 3 each copy inputs 0, 1 of their group.
  Tensor grouped = init::dirac_(kiln::empty({4, 2, 3, 3}), 2);
  std::vector<double> g = values_of(grouped);
  double total = 0.0;
  for (double v : g) total += v;
  EXPECT_EQ(total, 4.0);
  for (int64_t o : {0, 1, 2, 3}) EXPECT_EQ(grouped.at<double>({o, o % 2, 1, 1}), 1.0) << o;
  expect_error([] { init::dirac_(kiln::empty({2, 2})); }, "dirac_: only tensors with 3, 4 or 5 dimensions are supported");
  expect_error([] { init::dirac_(kiln::empty({3, 2, 3}), 2); }, "dirac_: dim 0 (3) must be divisible by groups (2)");
}

TEST(Init, XavierBoundsAndStd) {
  Generator gen(3);
  // fan_in + fan_out = 500 + 400.
  double std = std::sqrt(2.0 / 900.0);
  Tensor u = init::xavier_uniform_(kiln::empty({400, 500}), 1.0, &gen);
  Moments m = moments_of(u);
  double bound = std::sqrt(3.0) * std;
  EXPECT_GE(m.min, -bound);
  EXPECT_LE(m.max, bound);
  EXPECT_GT(m.max, 0.999 * bound);
  expect_moments(u, 0.0, std);
  Tensor scaled = init::xavier_uniform_(kiln::empty({400, 500}), 2.0, &gen);
  EXPECT_GT(moments_of(scaled).max, 1.99 * bound);

  Tensor n = init::xavier_normal_(kiln::empty({400, 500}), init::calculate_gain("tanh"), &gen);
  expect_moments(n, 0.0, 5.0 / 3.0 * std);
}

TEST(Init, KaimingBoundsAndStd) {
  Generator gen(4);
  // torch's Linear default, kaiming_uniform_(a = sqrt(5)): bound = 1 / sqrt(fan_in).
  Tensor w = init::kaiming_uniform_(kiln::empty({500, 400}), std::sqrt(5.0), "fan_in", "leaky_relu", &gen);
  Moments m = moments_of(w);
  EXPECT_GE(m.min, -0.05);
  EXPECT_LE(m.max, 0.05);
  EXPECT_GT(m.max, 0.0499);
  expect_moments(w, 0.0, 0.05 / std::sqrt(3.0));

  // Conv weight (64, 32, 3, 3), fan_out = 64 * 9, relu: std = sqrt(2) / 24.
  Tensor c = init::kaiming_normal_(kiln::empty({64, 32, 3, 3}, DType::Float64), 0.0, "fan_out", "relu", &gen);
  expect_moments(c, 0.0, std::sqrt(2.0) / 24.0);

  expect_error([] { init::kaiming_uniform_(kiln::empty({2, 2}), 0.0, "fan_avg"); },
               "kaiming_uniform_: mode 'fan_avg' is not supported; use 'fan_in' or 'fan_out'");
  expect_error([] { init::kaiming_normal_(kiln::empty({2, 2}), 0.0, "fan_in", "gelu"); },
               "unsupported nonlinearity 'gelu'");
}

TEST(Init, GeneratorMakesDrawsReproducible) {
  Generator a(7), b(7), c(8);
  Tensor x = init::kaiming_uniform_(kiln::empty({8, 8}), 0.0, "fan_in", "relu", &a);
  Tensor y = init::kaiming_uniform_(kiln::empty({8, 8}), 0.0, "fan_in", "relu", &b);
  Tensor z = init::kaiming_uniform_(kiln::empty({8, 8}), 0.0, "fan_in", "relu", &c);
  EXPECT_EQ(values_of(x), values_of(y));
  EXPECT_NE(values_of(x), values_of(z));
  Tensor t1 = init::trunc_normal_(kiln::empty({16}), 0.0, 1.0, -2.0, 2.0, &a);
  Tensor t2 = init::trunc_normal_(kiln::empty({16}), 0.0, 1.0, -2.0, 2.0, &b);
  EXPECT_EQ(values_of(t1), values_of(t2));
}

TEST(Init, WorksOnParametersThatRequireGrad) {
  Tensor w = kiln::empty({3, 4});
  w.requires_grad_();
  init::kaiming_uniform_(w);
  init::constant_(w, 0.25);
  EXPECT_EQ(values_of(w), std::vector<double>(12, 0.25));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  // Outside init, the same in-place write is refused while grad mode is on.
  expect_error([&] { kiln::fill_(w, 1.0); }, "fill_: in-place operation on a tensor that requires grad");
}

TEST(Init, ZeroElementTensorsAreLeftAlone) {
  Tensor empty = kiln::empty({0, 5});
  EXPECT_TRUE(init::kaiming_uniform_(empty).is_same(empty));
  EXPECT_TRUE(init::xavier_normal_(empty).is_same(empty));
  EXPECT_TRUE(init::trunc_normal_(empty).is_same(empty));
}

}  // namespace
}  // namespace kiln::nn
