// Gradients of sign (zero everywhere, as torch) and of where with a number
// for a branch (the tensor branch gets the gradient where it was chosen):
// gradcheck and gradgradcheck in float64 and the values by hand.
#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

TEST(SignGrad, IsZeroAndRecorded) {
  Tensor x = leaf_of({-2, 0, 3}, {3});
  Tensor y = sign(x);
  EXPECT_EQ(y.grad_fn_name(), "SignBackward");
  sum(mul(y, 5.0)).backward();
  expect_values(x.grad(), {0, 0, 0});
  // Away from 0 finite differences agree: the function is flat there.
  expect_gradcheck([](const TensorList& in) { return TensorList{sign(in[0])}; }, {leaf({2, 3}, 1, 0.5, 1.0)});
  // Through a product: d(x sign(x))/dx = sign(x), which is |x|'.
  Tensor z = leaf_of({-2, 3}, {2});
  sum(mul(z, sign(z))).backward();
  expect_values(z.grad(), {-1, 1});
}

TEST(WhereScalarsGrad, ANumberForTheTrueBranch) {
  Tensor cond = from_vector<bool>({true, false, false, true, false, true}, {2, 3});
  autograd::GradcheckFn fn = [cond](const TensorList& in) { return TensorList{where(cond, 0.5, in[0])}; };
  expect_gradcheck(fn, {leaf({2, 3}, 2)});
  expect_gradcheck(fn, {transposed_leaf({2, 3}, 3)});
  expect_gradgradcheck(fn, {leaf({2, 3}, 4)});
  // b broadcasts up to cond's shape: its gradient sums over the added dims.
  expect_gradcheck(fn, {leaf({3}, 5)});
  Tensor b = leaf({3}, 6);
  Tensor y = where(cond, -1.0, b);
  EXPECT_EQ(y.grad_fn_name(), "WhereBackward");
  y.backward(full({2, 3}, 2.0, DType::Float64));
  expect_values(b.grad(), {0, 4, 2});  // where cond is false: column 0 never, column 1 twice, column 2 once
}

TEST(WhereScalarsGrad, TwoNumbersGiveAConstant) {
  Tensor cond = from_vector<bool>({true, false});
  Tensor y = where(cond, 1.0, 0.0);
  EXPECT_FALSE(y.requires_grad());
  expect_values(y, {1, 0});
}

}  // namespace
}  // namespace kiln::gradtest
