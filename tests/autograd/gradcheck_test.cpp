// gradcheck and gradgradcheck themselves: they pass correct gradients, catch
// wrong ones with a message that locates the entry, and leave the caller's
// tensors alone.
#include "autograd/function.h"
#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

using autograd::record;

// x * x whose backward is off by `scale`: what a buggy op looks like.
Tensor wrong_square(const Tensor& x, double scale) {
  Tensor out = autograd::untracked([&] { return ops::mul(x, x); });
  if (autograd::needs_grad({x})) {
    record("wrong_square", {x}, {out}, [x, scale](const TensorList& g) -> TensorList {
      return {mul(mul(g[0], x), 2.0 * scale)};
    });
  }
  return out;
}

// x * x with a correct first derivative whose backward is not
// differentiable in x (it uses x's values as a constant), so its second
// derivative is wrong.
Tensor square_with_constant_backward(const Tensor& x) {
  Tensor out = autograd::untracked([&] { return ops::mul(x, x); });
  if (autograd::needs_grad({x})) {
    record("square", {x}, {out}, [x](const TensorList& g) -> TensorList { return {mul(g[0], mul(x.detach(), 2.0))}; });
  }
  return out;
}

TEST(Gradcheck, PassesACorrectGradient) {
  expect_gradcheck([](const TensorList& in) { return TensorList{wrong_square(in[0], 1.0)}; }, {leaf({2, 3}, 1)});
}

TEST(Gradcheck, ReportsAWrongGradientWithItsLocation) {
  Tensor x = leaf_of({1, 2}, {2});
  expect_error(
      [&] { autograd::gradcheck([](const TensorList& in) { return TensorList{wrong_square(in[0], 1.5)}; }, {x}); },
      "differ in 2 of 4 entries");
  expect_error(
      [&] { autograd::gradcheck([](const TensorList& in) { return TensorList{wrong_square(in[0], 1.5)}; }, {x}); },
      "output 0 element 1, input 0 element 1: analytic 6 vs numerical 4");
}

TEST(Gradcheck, NamesTheInputAndOutputPositions) {
  // Output 1 depends on input 2 wrongly; input 1 is an index tensor.
  autograd::GradcheckFn fn = [](const TensorList& in) {
    return TensorList{mul(in[0], 2.0), wrong_square(in[2], 2.0)};
  };
  Tensor index = from_vector<int64_t>({0}, {1});
  expect_error([&] { autograd::gradcheck(fn, {leaf({2}, 2), index, leaf_of({3}, {1})}); },
               "output 1 element 0, input 2 element 0: analytic 12 vs numerical 6");
}

TEST(Gradcheck, RequiresFloat64Inputs) {
  Tensor x = kiln::rand({3}).requires_grad_();
  expect_error([&] { autograd::gradcheck([](const TensorList& in) { return in; }, {x}); },
               "gradcheck: input 0 requires grad but is float32");
  expect_error([&] { autograd::gradcheck([](const TensorList& in) { return in; }, {uniform64({3}, 3)}); },
               "gradcheck: no input requires grad");
}

TEST(Gradcheck, KeepsTheInputLayoutAndLeavesTheInputsAlone) {
  Tensor x = strided_leaf({3, 4}, 4);
  std::vector<double> before = values(x);
  uint64_t version = x.version();
  Shape strides = x.strides();
  int64_t offset = x.storage_offset();
  int calls = 0;
  autograd::GradcheckFn fn = [&](const TensorList& in) {
    ++calls;
    EXPECT_EQ(in[0].strides(), strides);
    EXPECT_EQ(in[0].storage_offset(), offset);
    EXPECT_NE(in[0].storage(), x.storage());
    return TensorList{tanh(in[0])};
  };
  expect_gradcheck(fn, {x});
  EXPECT_EQ(calls, 1 + 2 * 12);  // once for the graph, twice per element
  EXPECT_EQ(values(x), before);
  EXPECT_EQ(x.version(), version);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Gradcheck, IgnoresIntegerOutputsAndUnusedInputs) {
  autograd::GradcheckFn fn = [](const TensorList& in) {
    ValuesIndices r = max(in[0], 1);
    return TensorList{r.values, r.indices};
  };
  expect_gradcheck(fn, {leaf({3, 4}, 5)});
  // Input 1 is unused: both Jacobians are zero there.
  expect_gradcheck([](const TensorList& in) { return TensorList{exp(in[0])}; }, {leaf({2}, 6), leaf({3}, 7)});
  // An output that does not depend on any input.
  expect_gradcheck([](const TensorList& in) { return TensorList{exp(in[0]), ones({2}, DType::Float64)}; },
                   {leaf({2}, 8)});
}

TEST(Gradcheck, ToleranceOptions) {
  // A 1% error passes with rtol 2e-2 and fails with the default 1e-3.
  autograd::GradcheckFn fn = [](const TensorList& in) { return TensorList{wrong_square(in[0], 1.01)}; };
  GradcheckOptions loose;
  loose.rtol = 2e-2;
  expect_gradcheck(fn, {leaf({3}, 9, 1, 2)}, loose);
  expect_error([&] { autograd::gradcheck(fn, {leaf({3}, 9, 1, 2)}); }, "gradcheck: the analytic and numerical");
}

TEST(Gradgradcheck, CatchesABackwardThatIsNotDifferentiable) {
  autograd::GradcheckFn fn = [](const TensorList& in) { return TensorList{square_with_constant_backward(in[0])}; };
  Tensor x = leaf({3}, 10);
  expect_gradcheck(fn, {x});
  expect_error([&] { autograd::gradgradcheck(fn, {x}); }, "gradcheck: the analytic and numerical Jacobians differ");
  // The same function written with differentiable ops passes.
  expect_gradgradcheck([](const TensorList& in) { return TensorList{mul(in[0], in[0])}; }, {x});
}

}  // namespace
}  // namespace kiln::gradtest
