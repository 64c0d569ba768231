// Gradients of the binary ops: gradcheck with equal shapes, with
// broadcasting both ways, with non-contiguous inputs, second derivatives,
// and the tie and edge conventions of pow, maximum, minimum and where.
#include <cmath>
#include <limits>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

struct BinaryCase {
  const char* name;
  BinaryFn fn;
  double lo, hi;  // input range for both operands
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, -2, 2},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }, -2, 2},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, -2, 2},
      {"sub_alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -3); }, -2, 2},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, -2, 2},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, 0.5, 2},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -2, 2},
      {"where", [](const Tensor& a, const Tensor& b) { return where(ops::gt(a, b), a, b); }, -2, 2},
      {"operator+", [](const Tensor& a, const Tensor& b) { return a + b; }, -2, 2},
      {"operator-", [](const Tensor& a, const Tensor& b) { return a - b; }, -2, 2},
      {"operator*", [](const Tensor& a, const Tensor& b) { return a * b; }, -2, 2},
      {"operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, 0.5, 2},
  };
}

autograd::GradcheckFn lift(const BinaryFn& f) {
  return [f](const TensorList& in) { return TensorList{f(in[0], in[1])}; };
}

TEST(BinaryGrad, EqualShapes) {
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {leaf({3, 4}, 1, c.lo, c.hi), leaf({3, 4}, 2, c.lo, c.hi)});
  }
}

TEST(BinaryGrad, BroadcastingSumsGradientsBackToEachShape) {
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    // (2, 3, 4) with (3, 1): b gains a leading dim and stretches its last.
    expect_gradcheck(lift(c.fn), {leaf({2, 3, 4}, 3, c.lo, c.hi), leaf({3, 1}, 4, c.lo, c.hi)});
    // (4) with (2, 1, 4) and (1, 3) with (2, 1): both sides broadcast.
    expect_gradcheck(lift(c.fn), {leaf({4}, 5, c.lo, c.hi), leaf({2, 1, 4}, 6, c.lo, c.hi)});
    expect_gradcheck(lift(c.fn), {leaf({1, 3}, 7, c.lo, c.hi), leaf({2, 1}, 8, c.lo, c.hi)});
    // A 0-dim operand.
    expect_gradcheck(lift(c.fn), {leaf({2, 3}, 9, c.lo, c.hi), leaf({}, 10, c.lo, c.hi)});
  }
}

TEST(BinaryGrad, NonContiguousInputs) {
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradcheck(lift(c.fn), {transposed_leaf({3, 4}, 11, c.lo, c.hi), strided_leaf({3, 4}, 12, c.lo, c.hi)});
  }
}

TEST(BinaryGrad, OnlyOneSideRequiresGrad) {
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor constant = uniform64({3, 1}, 13, c.lo, c.hi);
    expect_gradcheck(lift(c.fn), {leaf({2, 3, 4}, 14, c.lo, c.hi), constant});
    expect_gradcheck(lift(c.fn), {constant, leaf({2, 3, 4}, 15, c.lo, c.hi)});
  }
}

TEST(BinaryGrad, SecondDerivatives) {
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradgradcheck(lift(c.fn), {leaf({2, 3}, 16, c.lo, c.hi), leaf({3}, 17, c.lo, c.hi)});
  }
}

TEST(BinaryGrad, ScalarOperands) {
  std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> cases = {
      {"add", [](const Tensor& x) { return add(x, 1.5); }},
      {"sub", [](const Tensor& x) { return sub(x, 1.5); }},
      {"mul", [](const Tensor& x) { return mul(x, -2.5); }},
      {"div", [](const Tensor& x) { return div(x, 4); }},
      {"pow", [](const Tensor& x) { return pow(x, 3); }},
      {"pow_fractional", [](const Tensor& x) { return pow(x, 2.5); }},
      {"pow_negative", [](const Tensor& x) { return pow(x, -1.5); }},
      {"pow_zero", [](const Tensor& x) { return pow(x, 0); }},
      {"pow_one", [](const Tensor& x) { return pow(x, 1); }},
      {"where_scalar", [](const Tensor& x) { return where(ops::gt(x, 1), x, 7.0); }},
      {"scalar+", [](const Tensor& x) { return 2.0 + x; }},
      {"scalar-", [](const Tensor& x) { return 2.0 - x; }},
      {"scalar*", [](const Tensor& x) { return 2.0 * x; }},
      {"scalar/", [](const Tensor& x) { return 2.0 / x; }},
      {"+scalar", [](const Tensor& x) { return x + 2.0; }},
      {"-scalar", [](const Tensor& x) { return x - 2.0; }},
      {"*scalar", [](const Tensor& x) { return x * 2.0; }},
      {"/scalar", [](const Tensor& x) { return x / 2.0; }},
  };
  for (const auto& [name, f] : cases) {
    SCOPED_TRACE(name);
    autograd::GradcheckFn fn = [f](const TensorList& in) { return TensorList{f(in[0])}; };
    expect_gradcheck(fn, {leaf({3, 4}, 18, 0.5, 2)});
    expect_gradcheck(fn, {transposed_leaf({3, 4}, 19, 0.5, 2)});
    expect_gradgradcheck(fn, {leaf({2, 3}, 20, 0.5, 2)});
  }
}

TEST(BinaryGrad, ForwardMatchesTheTensorLayer) {
  Tensor a = leaf({3, 4}, 21, 0.5, 2), b = leaf({4}, 22, 0.5, 2);
  Tensor cond = ops::gt(a, 1);
  expect_same(add(a, b, 2), ops::add(a, b, 2));
  expect_same(sub(a, b), ops::sub(a, b));
  expect_same(mul(a, b), ops::mul(a, b));
  expect_same(div(a, b), ops::div(a, b));
  expect_same(pow(a, b), ops::pow(a, b));
  expect_same(pow(a, 2.5), ops::pow(a, 2.5));
  expect_same(maximum(a, b), ops::maximum(a, b));
  expect_same(minimum(a, b), ops::minimum(a, b));
  expect_same(where(cond, a, b), ops::where(cond, a, b));
  expect_same(where(cond, a, 3.0), ops::where(cond, a, 3.0));
  expect_same(2.0 / a, ops::operator/(2.0, a));
}

TEST(BinaryGrad, MixedDtypesGiveEachInputItsOwnDtype) {
  Tensor a = kiln::rand({3}).requires_grad_();  // float32
  Tensor b = leaf({3}, 23);                     // float64
  Tensor y = mul(a, b);
  EXPECT_EQ(y.dtype(), DType::Float64);
  sum(y).backward();
  EXPECT_EQ(a.grad().dtype(), DType::Float32);
  EXPECT_EQ(b.grad().dtype(), DType::Float64);
  expect_same(a.grad(), b.detach().to(DType::Float32));
}

// pow(a, b) for b: a^b log(a), defined as 0 where a == 0 and b >= 0.
// pow(a, 0) for a: 0 even at a == 0, where b a^(b-1) would be 0 * inf.
TEST(BinaryGrad, PowAtZeroBase) {
  Tensor a = leaf_of({0, 0, 2}, {3});
  Tensor b = leaf_of({2, 0, 3}, {3});
  sum(pow(a, b)).backward();
  expect_values(a.grad(), {0, 0, 12});
  expect_values(b.grad(), {0, 0, 8 * std::log(2.0)});

  Tensor x = leaf_of({0, 1}, {2});
  sum(pow(x, 0)).backward();
  expect_values(x.grad(), {0, 0});
}

TEST(BinaryGrad, MaximumAndMinimumSplitTiesInHalves) {
  Tensor a = leaf_of({1, 2, 3}, {3});
  Tensor b = leaf_of({2, 2, 1}, {3});
  sum(maximum(a, b)).backward();
  expect_values(a.grad(), {0, 0.5, 1});
  expect_values(b.grad(), {1, 0.5, 0});

  Tensor c = leaf_of({1, 2, 3}, {3});
  Tensor d = leaf_of({2, 2, 1}, {3});
  sum(minimum(c, d)).backward();
  expect_values(c.grad(), {1, 0.5, 0});
  expect_values(d.grad(), {0, 0.5, 1});
}

TEST(BinaryGrad, WhereSendsEachElementsGradientToOneSide) {
  Tensor cond = from_vector<bool>({true, false, true}, {3});
  Tensor a = leaf_of({1, 2, 3}, {3});
  Tensor b = leaf_of({4}, {1});
  where(cond, a, b).backward(from_vector<double>({10, 20, 30}, {3}));
  expect_values(a.grad(), {10, 0, 30});
  expect_values(b.grad(), {20});
}

TEST(BinaryGrad, SavedOperandModifiedInPlaceIsAnError) {
  Tensor a = leaf({3}, 24);
  Tensor b = uniform64({3}, 25);
  Tensor y = mul(a, b);
  ops::mul_(b, 2.0);
  expect_error([&] { sum(y).backward(); }, "MulBackward: a tensor saved for backward was modified by an in-place");
}

}  // namespace
}  // namespace kiln::gradtest
