// Gradients of the matrix products: matmul in every torch shape case
// (1-d operands, broadcast batch dims), mm, bmm and linear, on
// non-contiguous operands, with second derivatives.
#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

autograd::GradcheckFn two(Tensor (*f)(const Tensor&, const Tensor&)) {
  return [f](const TensorList& in) { return TensorList{f(in[0], in[1])}; };
}

struct ShapePair {
  Shape a, b;
};

// torch.matmul's cases: dot, vector-matrix, matrix-vector, matrix-matrix,
// batched with a shared matrix on either side, broadcast batch dims, and 1-d
// operands against batches.
std::vector<ShapePair> matmul_shapes() {
  return {
      {{3}, {3}},                  // dot -> ()
      {{3}, {3, 2}},               // (K) @ (K, N) -> (N)
      {{2, 3}, {3}},               // (M, K) @ (K) -> (M)
      {{2, 3}, {3, 4}},            // (M, N)
      {{2, 2, 3}, {3, 4}},         // batch @ shared matrix
      {{2, 3}, {2, 3, 4}},         // shared matrix @ batch
      {{2, 1, 2, 3}, {3, 3, 2}},   // batch dims (2, 1) and (3) broadcast to (2, 3)
      {{3}, {2, 3, 4}},            // vector @ batch -> (2, 4)
      {{2, 2, 3}, {3}},            // batch @ vector -> (2, 2)
      {{1, 2, 3}, {2, 3, 2}},      // batch dim 1 against 2
  };
}

TEST(LinalgGrad, MatmulInEveryShapeCase) {
  uint64_t seed = 1;
  for (const ShapePair& s : matmul_shapes()) {
    SCOPED_TRACE(shape_str(s.a) + " @ " + shape_str(s.b));
    expect_gradcheck(two(matmul), {leaf(s.a, seed), leaf(s.b, seed + 1)});
    // Each side alone, so that the paths computing only one gradient run.
    expect_gradcheck(two(matmul), {leaf(s.a, seed + 2), uniform64(s.b, seed + 3)});
    expect_gradcheck(two(matmul), {uniform64(s.a, seed + 4), leaf(s.b, seed + 5)});
    seed += 6;
  }
}

TEST(LinalgGrad, MatmulSecondDerivatives) {
  uint64_t seed = 100;
  for (const ShapePair& s : matmul_shapes()) {
    SCOPED_TRACE(shape_str(s.a) + " @ " + shape_str(s.b));
    expect_gradgradcheck(two(matmul), {leaf(s.a, seed), leaf(s.b, seed + 1)});
    seed += 2;
  }
}

TEST(LinalgGrad, MatmulOnTransposedAndStridedOperands) {
  expect_gradcheck(two(matmul), {transposed_leaf({3, 4}, 7), strided_leaf({4, 2}, 8)});
  expect_gradcheck(two(matmul), {transposed_leaf({2, 3, 4}, 9), transposed_leaf({4, 2}, 10)});
  expect_gradcheck(two(matmul), {strided_leaf({2, 3, 4}, 11), transposed_leaf({2, 4, 2}, 12)});
}

TEST(LinalgGrad, MmAndBmm) {
  expect_gradcheck(two(mm), {leaf({2, 3}, 13), leaf({3, 4}, 14)});
  expect_gradcheck(two(mm), {transposed_leaf({2, 3}, 15), strided_leaf({3, 4}, 16)});
  expect_gradcheck(two(mm), {leaf({2, 3}, 17), uniform64({3, 4}, 18)});
  expect_gradgradcheck(two(mm), {leaf({2, 3}, 19), leaf({3, 2}, 20)});
  expect_gradcheck(two(bmm), {leaf({2, 2, 3}, 21), leaf({2, 3, 4}, 22)});
  expect_gradcheck(two(bmm), {transposed_leaf({2, 2, 3}, 23), strided_leaf({2, 3, 2}, 24)});
  expect_gradcheck(two(bmm), {uniform64({2, 2, 3}, 25), leaf({2, 3, 4}, 26)});
  expect_gradgradcheck(two(bmm), {leaf({2, 2, 3}, 27), leaf({2, 3, 2}, 28)});
}

TEST(LinalgGrad, LinearWithAndWithoutBias) {
  autograd::GradcheckFn with_bias = [](const TensorList& in) { return TensorList{linear(in[0], in[1], in[2])}; };
  autograd::GradcheckFn no_bias = [](const TensorList& in) { return TensorList{linear(in[0], in[1])}; };
  for (const Shape& x_shape : {Shape{3}, Shape{2, 3}, Shape{2, 2, 3}}) {
    SCOPED_TRACE("x " + shape_str(x_shape));
    expect_gradcheck(with_bias, {leaf(x_shape, 29), leaf({4, 3}, 30), leaf({4}, 31)});
    expect_gradcheck(no_bias, {leaf(x_shape, 32), leaf({4, 3}, 33)});
    expect_gradgradcheck(with_bias, {leaf(x_shape, 34), leaf({4, 3}, 35), leaf({4}, 36)});
  }
  // Only some inputs need a gradient; non-contiguous input and weight.
  expect_gradcheck(with_bias, {uniform64({2, 3}, 37), leaf({4, 3}, 38), uniform64({4}, 39)});
  expect_gradcheck(with_bias, {leaf({2, 3}, 40), uniform64({4, 3}, 41), leaf({4}, 42)});
  expect_gradcheck(with_bias, {transposed_leaf({2, 3, 4}, 43), transposed_leaf({2, 4}, 44), leaf({2}, 45)});
}

TEST(LinalgGrad, LinearGradientsAreTheTextbookOnes) {
  // y = x W^T + b: dx = g W, dW = g^T x (rows of every leading dim), db = sum g.
  Tensor x = leaf({2, 3, 5}, 46), w = leaf({4, 5}, 47), b = leaf({4}, 48);
  Tensor g = uniform64({2, 3, 4}, 49);
  linear(x, w, b).backward(g);
  expect_same(x.grad(), ops::matmul(g, w.detach()), 1e-12);
  expect_same(w.grad(), ops::mm(g.reshape({6, 4}).t(), x.detach().reshape({6, 5})), 1e-12);
  expect_same(b.grad(), ops::sum(g, {0, 1}), 1e-12);
}

TEST(LinalgGrad, ForwardMatchesTheTensorLayer) {
  Tensor a = leaf({2, 3, 4}, 50), b = leaf({4, 2}, 51), c = leaf({2, 4, 3}, 52), bias = leaf({2}, 53);
  expect_same(matmul(a, b), ops::matmul(a, b));
  expect_same(mm(a.select(0, 0), b), ops::mm(a.select(0, 0), b));
  expect_same(bmm(a, c), ops::bmm(a, c));
  // ops::linear copies the bias into its result, which autograd refuses for
  // a tensor that requires grad: the tensor layer gets detached inputs.
  expect_same(linear(a, b.t(), bias), ops::linear(a.detach(), b.detach().t(), bias.detach()));
  EXPECT_EQ(linear(a, b.t(), bias).grad_fn_name(), "LinearBackward");
}

TEST(LinalgGrad, ShapeErrorsComeFromTheTensorLayer) {
  expect_error([] { matmul(leaf({2, 3}, 54), leaf({2, 3}, 55)); },
               "matmul: shapes [2, 3] and [2, 3] cannot be multiplied");
  expect_error([] { linear(leaf({2, 3}, 56), leaf({4, 2}, 57)); }, "linear: input of shape [2, 3] has 3 features");
}

}  // namespace
}  // namespace kiln::gradtest
