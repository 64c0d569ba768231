// Higher derivatives: the backward of every op is written with
// differentiable ops, so backward(create_graph=true) and
// autograd::grad(create_graph=true) can be differentiated again.
#include <cmath>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

TEST(DoubleBackward, SecondAndThirdDerivativesOfACube) {
  Tensor x = leaf_of({-1.5, 0.5, 2}, {3});
  Tensor y = sum(pow(x, 3));
  Tensor dy = autograd::grad({y}, {x}, {}, /*retain_graph=*/false, /*create_graph=*/true)[0];
  expect_values(dy, {6.75, 0.75, 12});  // 3x^2
  Tensor d2y = autograd::grad({sum(dy)}, {x}, {}, false, /*create_graph=*/true)[0];
  expect_values(d2y, {-9, 3, 12});  // 6x
  Tensor d3y = autograd::grad({sum(d2y)}, {x})[0];
  expect_values(d3y, {6, 6, 6});
}

TEST(DoubleBackward, ThroughBackwardWithCreateGraph) {
  Tensor x = leaf_of({-1.5, 0.5, 2}, {3});
  sum(mul(mul(x, x), x)).backward(Tensor(), /*retain_graph=*/false, /*create_graph=*/true);
  Tensor first = x.grad();
  EXPECT_TRUE(first.requires_grad());
  expect_values(first, {6.75, 0.75, 12});
  Tensor second = autograd::grad({sum(first)}, {x})[0];
  expect_values(second, {-9, 3, 12});
  x.set_grad(Tensor());  // breaks the grad -> graph -> x cycle (Tensor::backward)
}

TEST(DoubleBackward, SecondDerivativeOfTanhAndSigmoid) {
  std::vector<double> xs = {-2, -0.3, 0, 0.7, 3};
  Tensor x = leaf_of(xs, {5});
  Tensor dt = autograd::grad({sum(tanh(x))}, {x}, {}, false, true)[0];
  Tensor d2t = autograd::grad({sum(dt)}, {x})[0];
  Tensor z = leaf_of(xs, {5});
  Tensor ds = autograd::grad({sum(sigmoid(z))}, {z}, {}, false, true)[0];
  Tensor d2s = autograd::grad({sum(ds)}, {z})[0];
  std::vector<double> tanh2, sigmoid2;
  for (double v : xs) {
    double t = std::tanh(v), s = 1 / (1 + std::exp(-v));
    tanh2.push_back(-2 * t * (1 - t * t));
    sigmoid2.push_back(s * (1 - s) * (1 - 2 * s));
  }
  expect_values(d2t, tanh2, 1e-14);
  expect_values(d2s, sigmoid2, 1e-14);
}

TEST(DoubleBackward, MixedPartialOfAProduct) {
  // d/db (d(a*b)/da) = 1 for every element.
  Tensor a = leaf({3}, 1), b = leaf({3}, 2);
  Tensor da = autograd::grad({sum(mul(a, b))}, {a}, {}, false, true)[0];
  expect_same(da, b.detach());
  Tensor dadb = autograd::grad({sum(da)}, {b})[0];
  expect_values(dadb, {1, 1, 1});
}

// Second derivatives of the ops the brief names, and of a small network.
TEST(DoubleBackward, GradgradcheckOnKeyOps) {
  expect_gradgradcheck([](const TensorList& in) { return TensorList{mul(in[0], in[1])}; },
                       {leaf({2, 3}, 3), leaf({2, 3}, 4)});
  expect_gradgradcheck([](const TensorList& in) { return TensorList{exp(in[0])}; }, {leaf({2, 3}, 5)});
  expect_gradgradcheck([](const TensorList& in) { return TensorList{tanh(in[0])}; }, {leaf({2, 3}, 6)});
  expect_gradgradcheck([](const TensorList& in) { return TensorList{matmul(in[0], in[1])}; },
                       {leaf({2, 2, 3}, 7), leaf({3, 2}, 8)});
  expect_gradgradcheck([](const TensorList& in) { return TensorList{softmax(in[0], 1)}; }, {leaf({2, 4}, 9)});
}

TEST(DoubleBackward, GradgradcheckOnASmallNetwork) {
  autograd::GradcheckFn mlp = [](const TensorList& in) {
    const Tensor &x = in[0], &w1 = in[1], &b1 = in[2], &w2 = in[3];
    Tensor h = gelu(linear(x, w1, b1));
    Tensor logits = matmul(h, w2.t());
    return TensorList{sum(mul(log_softmax(logits, -1), 0.5))};
  };
  TensorList inputs = {leaf({2, 3}, 10), leaf({4, 3}, 11), leaf({4}, 12), leaf({2, 4}, 13)};
  expect_gradcheck(mlp, inputs);
  expect_gradgradcheck(mlp, inputs);
}

}  // namespace
}  // namespace kiln::gradtest
