// Gradients of the reductions and softmax: gradcheck over dims and keepdim,
// on non-contiguous inputs, second derivatives, and how max-like
// reductions share the gradient among ties, as torch.
#include <cmath>
#include <limits>
#include <sstream>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;

autograd::GradcheckFn lift(const UnaryFn& f) {
  return [f](const TensorList& in) { return TensorList{f(in[0])}; };
}

// Every reduction with several dims/keepdim choices, as (name, fn, lo, hi).
struct ReduceCase {
  std::string name;
  UnaryFn fn;
  double lo = -2, hi = 2;
};

// "(dim 1, keepdim 0)", for test traces.
std::string label(const char* what, int64_t n, bool keepdim) {
  std::ostringstream os;
  os << "(" << what << " " << n << ", keepdim " << keepdim << ")";
  return os.str();
}

std::vector<ReduceCase> reduce_cases() {
  std::vector<ReduceCase> cases;
  std::vector<std::pair<Shape, bool>> dim_choices = {{{}, false}, {{1}, false}, {{-1}, true}, {{0, 2}, false},
                                                     {{2, 0}, true}};
  for (const auto& [dims, keepdim] : dim_choices) {
    std::string suffix = label("dims", static_cast<int64_t>(dims.size()), keepdim);
    cases.push_back({"sum" + suffix, [=](const Tensor& x) { return sum(x, dims, keepdim); }});
    cases.push_back({"sum_dtype" + suffix, [=](const Tensor& x) { return sum(x, dims, keepdim, DType::Float64); }});
    cases.push_back({"mean" + suffix, [=](const Tensor& x) { return mean(x, dims, keepdim); }});
    cases.push_back({"prod" + suffix, [=](const Tensor& x) { return prod(x, dims, keepdim); }, 0.5, 1.5});
    cases.push_back({"amax" + suffix, [=](const Tensor& x) { return amax(x, dims, keepdim); }});
    cases.push_back({"amin" + suffix, [=](const Tensor& x) { return amin(x, dims, keepdim); }});
    cases.push_back({"var" + suffix, [=](const Tensor& x) { return var(x, dims, 1, keepdim); }});
    cases.push_back({"var0" + suffix, [=](const Tensor& x) { return var(x, dims, 0, keepdim); }});
    cases.push_back({"std" + suffix, [=](const Tensor& x) { return kiln::std(x, dims, 1, keepdim); }});
    if (!dims.empty()) {
      cases.push_back({"logsumexp" + suffix, [=](const Tensor& x) { return logsumexp(x, dims, keepdim); }});
    }
  }
  for (int64_t dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      std::string suffix = label("dim", dim, keepdim);
      cases.push_back({"max_dim" + suffix, [=](const Tensor& x) { return max(x, dim, keepdim).values; }});
      cases.push_back({"min_dim" + suffix, [=](const Tensor& x) { return min(x, dim, keepdim).values; }});
    }
    std::string suffix = label("dim", dim, false);
    cases.push_back({"softmax" + suffix, [=](const Tensor& x) { return softmax(x, dim); }});
    cases.push_back({"log_softmax" + suffix, [=](const Tensor& x) { return log_softmax(x, dim); }});
  }
  cases.push_back({"max", [](const Tensor& x) { return max(x); }});
  cases.push_back({"min", [](const Tensor& x) { return min(x); }});
  return cases;
}

TEST(ReduceGrad, EveryReductionPassesGradcheck) {
  for (const ReduceCase& c : reduce_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {leaf({2, 3, 4}, 1, c.lo, c.hi)});
  }
}

TEST(ReduceGrad, EveryReductionPassesGradcheckOnNonContiguousInputs) {
  for (const ReduceCase& c : reduce_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {transposed_leaf({2, 4, 3}, 2, c.lo, c.hi)});
    expect_gradcheck(lift(c.fn), {strided_leaf({3, 2, 3}, 3, c.lo, c.hi)});
  }
}

TEST(ReduceGrad, EveryReductionPassesGradgradcheck) {
  for (const ReduceCase& c : reduce_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradgradcheck(lift(c.fn), {leaf({2, 2, 3}, 4, c.lo, c.hi)});
  }
}

TEST(ReduceGrad, ZeroDimInputs) {
  std::vector<ReduceCase> cases = {
      {"sum", [](const Tensor& x) { return sum(x, {0}); }},
      {"mean", [](const Tensor& x) { return mean(x, {-1}, true); }},
      {"prod", [](const Tensor& x) { return prod(x, {0}); }},
      {"amax", [](const Tensor& x) { return amax(x); }},
      {"max_dim", [](const Tensor& x) { return max(x, 0).values; }},
      {"max", [](const Tensor& x) { return max(x); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {0}); }},
      {"softmax", [](const Tensor& x) { return softmax(x, 0); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, -1); }},
  };
  for (const ReduceCase& c : cases) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {leaf({}, 5, 0.5, 1.5)});
  }
}

TEST(ReduceGrad, ForwardMatchesTheTensorLayer) {
  Tensor x = leaf({3, 4}, 6, 0.5, 1.5);
  expect_same(sum(x, {1}), ops::sum(x, {1}));
  expect_same(mean(x, {0}, true), ops::mean(x, {0}, true));
  expect_same(prod(x, {1}), ops::prod(x, {1}));
  expect_same(amax(x, {1}), ops::amax(x, {1}));
  expect_same(amin(x), ops::amin(x));
  expect_same(max(x, 1).values, ops::max(x, 1).values);
  expect_same(max(x, 1).indices, ops::max(x, 1).indices);
  expect_same(min(x, 0, true).values, ops::min(x, 0, true).values);
  expect_same(max(x), ops::max(x));
  expect_same(min(x), ops::min(x));
  expect_same(var(x, {1}), ops::var(x, {1}));
  expect_same(kiln::std(x, {0}, 0), ops::std(x, {0}, 0));
  expect_same(logsumexp(x, {1}), ops::logsumexp(x, {1}));
  expect_same(softmax(x, 1), ops::softmax(x, 1));
  expect_same(log_softmax(x, 0), ops::log_softmax(x, 0));
}

TEST(ReduceGrad, MaxAlongADimGivesIndicesWithoutGradient) {
  Tensor x = leaf_of({1, 5, 5, 2}, {2, 2});
  ValuesIndices r = max(x, 1);
  EXPECT_TRUE(r.values.requires_grad());
  EXPECT_FALSE(r.indices.requires_grad());
  EXPECT_EQ(r.values.grad_fn_name(), "MaxBackward");
  // A tie along the dim: all of the gradient goes to the returned index.
  r.values.backward(from_vector<double>({10, 20}, {2}));
  expect_values(x.grad(), {0, 10, 20, 0});
}

TEST(ReduceGrad, AmaxAndMaxShareTheGradientEvenlyAmongTies) {
  Tensor x = leaf_of({3, 1, 3, 2, 2, 2}, {2, 3});
  amax(x, {1}).backward(from_vector<double>({6, 9}, {2}));
  expect_values(x.grad(), {3, 0, 3, 3, 3, 3});

  Tensor y = leaf_of({1, 4, 4, 0, 4, 2}, {2, 3});
  max(y).backward();
  expect_values(y.grad(), {0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3, 0});

  Tensor z = leaf_of({-1, -1, 0}, {3});
  amin(z, {0}).backward();
  expect_values(z.grad(), {0.5, 0.5, 0});
  Tensor w = leaf_of({-1, -1, 0}, {3});
  min(w).backward();
  expect_values(w.grad(), {0.5, 0.5, 0});
}

TEST(ReduceGrad, MaxOverEverythingSendsTheGradientToNaNs) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = leaf_of({1, nan, 3}, {3});
  max(x).backward();
  expect_values(x.grad(), {0, 1, 0});
  Tensor z = leaf_of({1, nan, nan}, {3});
  min(z).backward();
  expect_values(z.grad(), {0, 0.5, 0.5});
  // amax, as torch, multiplies the (all false) mask by g / 0: NaN. Other
  // slices are unaffected.
  Tensor y = leaf_of({1, nan, 3, 1, 2, 0}, {2, 3});
  amax(y, {1}).backward(from_vector<double>({1, 1}, {2}));
  std::vector<double> gy = values(y.grad());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(gy[i])) << i;
  EXPECT_EQ(std::vector<double>(gy.begin() + 3, gy.end()), (std::vector<double>{0, 1, 0}));
}

// d prod / dx_i = product of the others, also where x_i is zero.
TEST(ReduceGrad, ProdWithZeros) {
  Tensor one_zero = leaf_of({2, 0, 3, 1, 2, 3}, {2, 3});
  prod(one_zero, {1}).backward(from_vector<double>({1, 1}, {2}));
  expect_values(one_zero.grad(), {0, 6, 0, 6, 3, 2});

  Tensor two_zeros = leaf_of({0, 5, 0}, {3});
  prod(two_zeros).backward();
  expect_values(two_zeros.grad(), {0, 0, 0});

  // Finite differences agree around a single zero, and second derivatives
  // hold there too.
  autograd::GradcheckFn fn = [](const TensorList& in) { return TensorList{prod(in[0], {1})}; };
  expect_gradcheck(fn, {leaf_of({2, 0, 3, 1, 2, 3}, {2, 3})});
  expect_gradgradcheck(fn, {leaf_of({2, 0, 3, 1, 2, 3}, {2, 3})});
}

TEST(ReduceGrad, VarianceWithTooFewElementsIsInfOrNaN) {
  // One element and correction 1: the forward divides 0 by 0 (NaN), and the
  // gradient is 2 (x - mean) / 0 = 0 * inf = NaN, as torch.
  Tensor x = leaf_of({3}, {1});
  sum(var(x)).backward();
  EXPECT_TRUE(std::isnan(values(x.grad())[0]));
}

TEST(ReduceGrad, StdOfAConstantRowHasZeroGradient) {
  Tensor x = leaf_of({2, 2, 2, 1, 2, 3}, {2, 3});
  sum(kiln::std(x, {1})).backward();
  expect_values(x.grad(), {0, 0, 0, -0.5, 0, 0.5});
}

TEST(ReduceGrad, SoftmaxGradientOfOneOutputMatchesTheClosedForm) {
  // d softmax_0 / d x_j = s_0 (delta_0j - s_j)
  Tensor x = leaf_of({0.5, -1, 2}, {3});
  Tensor s = softmax(x, 0);
  s.backward(from_vector<double>({1, 0, 0}, {3}));
  std::vector<double> sv = values(s);
  expect_values(x.grad(), {sv[0] * (1 - sv[0]), -sv[0] * sv[1], -sv[0] * sv[2]}, 1e-15);
}

TEST(ReduceGrad, SumOfEmptyDimsAndEmptyTensors) {
  Tensor x = leaf({0, 3}, 7);
  Tensor s = sum(x, {0});  // (3) zeros
  s.backward(from_vector<double>({1, 2, 3}, {3}));
  EXPECT_EQ(x.grad().shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace kiln::gradtest
