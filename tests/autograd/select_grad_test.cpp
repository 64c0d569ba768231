// Gradients of tril, triu, masked_fill and topk: gradcheck in float64 (and
// gradgradcheck, since each backward is written with the same ops), plus
// hand-computed gradients for the cases gradcheck cannot tell apart.
#include <limits>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

TEST(SelectGrad, TrilAndTriuOnEveryDiagonal) {
  for (int64_t diagonal : {-3, -1, 0, 1, 4}) {
    SCOPED_TRACE(diagonal);
    autograd::GradcheckFn lower = [diagonal](const TensorList& in) { return TensorList{tril(in[0], diagonal)}; };
    autograd::GradcheckFn upper = [diagonal](const TensorList& in) { return TensorList{triu(in[0], diagonal)}; };
    for (const auto& fn : {lower, upper}) {
      expect_gradcheck(fn, {leaf({2, 3, 4}, 1)});
      expect_gradcheck(fn, {transposed_leaf({4, 3}, 2)});
      expect_gradgradcheck(fn, {leaf({3, 3}, 3)});
    }
  }
}

TEST(SelectGrad, TrilPassesTheGradientThroughItsTriangleOnly) {
  Tensor x = leaf({2, 2}, 4);
  tril(x).backward(ones({2, 2}, DType::Float64));
  expect_values(x.grad(), {1, 0, 1, 1});
  EXPECT_EQ(tril(x).grad_fn_name(), "TrilBackward");
}

TEST(SelectGrad, MaskedFill) {
  Tensor mask = from_vector<bool>({true, false, false, true, true, false}, {2, 3});
  autograd::GradcheckFn fill = [mask](const TensorList& in) { return TensorList{masked_fill(in[0], mask, 0.25)}; };
  expect_gradcheck(fill, {leaf({2, 3}, 5)});
  expect_gradcheck(fill, {transposed_leaf({2, 3}, 6)});
  expect_gradgradcheck(fill, {leaf({2, 3}, 7)});
  // A mask that broadcasts x up: x's gradient sums over the added dim.
  Tensor wide = from_vector<bool>({true, false, false, false, true, false, false, false}, {2, 1, 4});
  autograd::GradcheckFn broadcast = [wide](const TensorList& in) { return TensorList{masked_fill(in[0], wide, -1.0)}; };
  expect_gradcheck(broadcast, {leaf({3, 4}, 8)});
}

TEST(SelectGrad, MaskedFillZeroesTheGradientOfFilledEntries) {
  Tensor x = leaf({1, 4}, 9);
  Tensor mask = from_vector<bool>({false, true, false, true}, {4});
  // Filled with -inf, as attention masks are: the gradient is still finite.
  Tensor y = masked_fill(x, mask, -std::numeric_limits<double>::infinity());
  sum(mul(y.narrow(1, 0, 1), 3.0)).backward();
  expect_values(x.grad(), {3, 0, 0, 0});
  Tensor z = leaf({2, 3}, 10);
  masked_fill(z, from_vector<bool>({true, false, true}, {1, 3}), 5.0).backward(full({2, 3}, 2.0, DType::Float64));
  expect_values(z.grad(), {0, 2, 0, 0, 2, 0});
}

TEST(SelectGrad, MaskedFillInPlaceIsRefusedOnATensorThatRequiresGrad) {
  Tensor x = leaf({3}, 11);
  expect_error([&] { masked_fill_(x, ones({3}, DType::Bool), 0.0); },
               "masked_fill_: in-place operation on a tensor that requires grad");
  {
    NoGradGuard no_grad;
    masked_fill_(x, from_vector<bool>({true, false, false}), 0.0);
  }
  EXPECT_EQ(values(x)[0], 0.0);
}

TEST(SelectGrad, TopKValues) {
  for (bool largest : {true, false}) {
    for (int64_t dim : {0, 1, -1}) {
      SCOPED_TRACE(testing::Message() << (largest ? "largest" : "smallest") << " dim " << dim);
      autograd::GradcheckFn fn = [=](const TensorList& in) { return TensorList{topk(in[0], 2, dim, largest).values}; };
      // Distinct values (uniform draws), so small perturbations keep the order.
      expect_gradcheck(fn, {leaf({3, 4, 5}, 12)});
      expect_gradcheck(fn, {transposed_leaf({4, 3}, 13)});
      expect_gradgradcheck(fn, {leaf({3, 4}, 14)});
    }
  }
  // Every entry, and none.
  expect_gradcheck([](const TensorList& in) { return TensorList{topk(in[0], 6).values}; }, {leaf({2, 6}, 15)});
  Tensor x = leaf({2, 3}, 16);
  sum(topk(x, 0).values).backward();
  expect_values(x.grad(), {0, 0, 0, 0, 0, 0});
}

TEST(SelectGrad, TopKSendsEachGradientToItsIndex) {
  Tensor x = leaf_of({0.5, 3.0, -1.0, 2.0}, {4});
  TopK best = topk(x, 2);
  EXPECT_FALSE(best.indices.requires_grad());
  EXPECT_EQ(best.values.grad_fn_name(), "TopkBackward");
  best.values.backward(from_vector<double>({10.0, 20.0}));
  expect_values(x.grad(), {0, 10, 0, 20});
  // A 0-dim input.
  Tensor s = leaf_of({1.5}, {});
  topk(s, 1).values.backward(scalar_tensor(4.0, DType::Float64));
  expect_values(s.grad(), {4});
}

}  // namespace
}  // namespace kiln::gradtest
