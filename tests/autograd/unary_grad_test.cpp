// Gradients of the unary ops: gradcheck on contiguous and non-contiguous
// inputs, second derivatives, and the conventions at kinks (abs, relu,
// clamp) that finite differences cannot see.
#include <cmath>
#include <limits>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  double lo, hi;  // input range where the op is smooth enough for eps = 1e-6
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, -2, 2},
      {"operator-", [](const Tensor& x) { return -x; }, -2, 2},
      {"abs", [](const Tensor& x) { return abs(x); }, -2, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return log(x); }, 0.5, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.5, 3},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.5, 3},
      {"relu", [](const Tensor& x) { return relu(x); }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -4, 4},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -2, 2},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, /*tanh_approximation=*/true); }, -4, 4},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.5); }, -1, 1},
      {"clamp_min", [](const Tensor& x) { return clamp(x, -0.5, std::nullopt); }, -1, 1},
      {"clamp_max", [](const Tensor& x) { return clamp(x, std::nullopt, 0.25); }, -1, 1},
  };
}

autograd::GradcheckFn lift(const std::function<Tensor(const Tensor&)>& f) {
  return [f](const TensorList& in) { return TensorList{f(in[0])}; };
}

TEST(UnaryGrad, EveryOpPassesGradcheck) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {leaf({3, 4}, 1, c.lo, c.hi)});
  }
}

TEST(UnaryGrad, EveryOpPassesGradcheckOnNonContiguousInputs) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {transposed_leaf({3, 4}, 2, c.lo, c.hi)});
    expect_gradcheck(lift(c.fn), {strided_leaf({2, 3}, 3, c.lo, c.hi)});
  }
}

TEST(UnaryGrad, EveryOpPassesGradgradcheck) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradgradcheck(lift(c.fn), {leaf({2, 3}, 4, c.lo, c.hi)});
  }
}

TEST(UnaryGrad, ZeroDimAndEmptyInputs) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {leaf({}, 5, c.lo, c.hi)});
    Tensor empty = leaf({0, 3}, 6);
    Tensor y = c.fn(empty);
    sum(y).backward();
    EXPECT_EQ(empty.grad().shape(), (Shape{0, 3}));
  }
}

TEST(UnaryGrad, ForwardMatchesTheTensorLayer) {
  Tensor x = leaf({4, 5}, 7, 0.25, 2);
  expect_same(neg(x), ops::neg(x));
  expect_same(abs(x), ops::abs(x));
  expect_same(exp(x), ops::exp(x));
  expect_same(log(x), ops::log(x));
  expect_same(sqrt(x), ops::sqrt(x));
  expect_same(rsqrt(x), ops::rsqrt(x));
  expect_same(relu(x), ops::relu(x));
  expect_same(sigmoid(x), ops::sigmoid(x));
  expect_same(tanh(x), ops::tanh(x));
  expect_same(gelu(x), ops::gelu(x));
  expect_same(gelu(x, true), ops::gelu(x, true));
  expect_same(clamp(x, 0.5, 1.5), ops::clamp(x, 0.5, 1.5));
  EXPECT_EQ(exp(x).grad_fn_name(), "ExpBackward");
  EXPECT_EQ(gelu(x).grad_fn_name(), "GeluBackward");
}

TEST(UnaryGrad, NoGraphWithoutRequiresGradOrUnderNoGrad) {
  Tensor plain = uniform64({3}, 8);
  EXPECT_FALSE(exp(plain).requires_grad());
  Tensor x = leaf({3}, 9);
  NoGradGuard no_grad;
  Tensor y = tanh(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
}

// Kinks: the gradient torch picks, which finite differences cannot check.
TEST(UnaryGrad, AbsHasZeroGradientAtZero) {
  Tensor x = leaf_of({-2, 0, 3}, {3});
  sum(abs(x)).backward();
  expect_values(x.grad(), {-1, 0, 1});
}

TEST(UnaryGrad, ReluHasZeroGradientAtZeroAndIgnoresNaNGradientsWhereOff) {
  Tensor x = leaf_of({-1, 0, 2}, {3});
  sum(relu(x)).backward();
  expect_values(x.grad(), {0, 0, 1});

  Tensor z = leaf_of({-1, 2}, {2});
  double nan = std::numeric_limits<double>::quiet_NaN();
  relu(z).backward(from_vector<double>({nan, 5}, {2}));
  expect_values(z.grad(), {0, 5});
}

TEST(UnaryGrad, ClampPassesTheGradientAtItsBounds) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = leaf_of({-2, -1, 0, 1, 2, nan}, {6});
  sum(clamp(x, -1, 1)).backward();
  expect_values(x.grad(), {0, 1, 1, 1, 0, 0});

  Tensor y = leaf_of({-2, -1, 3}, {3});
  sum(clamp(y, -1, std::nullopt)).backward();
  expect_values(y.grad(), {0, 1, 1});
}

// d/dx gelu(x) = Phi(x) + x phi(x), and its tanh approximation as torch
// writes it; both against closed forms in double.
TEST(UnaryGrad, GeluGradientsMatchClosedForms) {
  std::vector<double> xs = {-12, -6, -3, -1, -1e-40, 0, 1e-40, 0.5, 2, 7};
  Tensor x = leaf_of(xs, {static_cast<int64_t>(xs.size())});
  sum(gelu(x)).backward();
  std::vector<double> exact;
  for (double v : xs) {
    double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    exact.push_back(cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI));
  }
  std::vector<double> got = values(x.grad());
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(got[i], exact[i], 1e-14 + 1e-12 * std::abs(exact[i])) << "x = " << xs[i];
  }
  // The tail stays accurate in relative terms: at x = -12 the derivative is
  // about -2.6e-31, far below what 1 + erf(x) could resolve.
  EXPECT_LT(got[0], 0);
  EXPECT_NEAR(got[0] / exact[0], 1.0, 1e-9);

  Tensor t = leaf_of(xs, {static_cast<int64_t>(xs.size())});
  sum(gelu(t, true)).backward();
  std::vector<double> approx;
  for (double v : xs) {
    double k = std::sqrt(2 / M_PI), c = 0.044715;
    double th = std::tanh(k * (v + c * v * v * v));
    approx.push_back(0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * c * v * v));
  }
  expect_values(t.grad(), approx, 1e-12);
}

// Outside create_graph gelu's backward is the fused kernel, bit for bit
// ops::gelu_backward; under create_graph it is the formula written with
// differentiable ops, which agrees with the kernel and carries history for
// the second derivative (Note [Backward kernels and double backward]).
TEST(UnaryGrad, GeluBackwardIsTheFusedKernelOutsideCreateGraph) {
  for (bool tanh_form : {false, true}) {
    SCOPED_TRACE(tanh_form ? "gelu_tanh" : "gelu");
    for (DType dtype : {DType::Float64, DType::Float32}) {
      Tensor x = uniform64({67}, 12, -8, 8).to(dtype).requires_grad_();
      Tensor g = uniform64({67}, 13, -2, 2).to(dtype);
      gelu(x, tanh_form).backward(g);
      ASSERT_EQ(x.grad().dtype(), dtype);
      EXPECT_FALSE(x.grad().requires_grad());
      expect_same(x.grad(), ops::gelu_backward(g, x.detach(), tanh_form));

      Tensor y = x.detach().requires_grad_();
      Tensor dy = autograd::grad({gelu(y, tanh_form)}, {y}, {g}, /*retain_graph=*/false, /*create_graph=*/true)[0];
      EXPECT_TRUE(dy.requires_grad());
      expect_same(dy, x.grad(), dtype == DType::Float64 ? 1e-14 : 2e-6);
    }
  }
}

TEST(UnaryGrad, Float32GradientsHaveTheInputDtype) {
  Tensor x = ops::mul(kiln::rand({5}), 2.0).requires_grad_();
  sum(gelu(x)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  Tensor x64 = x.detach().to(DType::Float64).requires_grad_();
  sum(gelu(x64)).backward();
  expect_same(x.grad().to(DType::Float64), x64.grad(), 1e-5);
}

}  // namespace
}  // namespace kiln::gradtest
