// Note [Split backward]: backward_input then backward_weight give what one
// backward gives, with each node asked for each gradient exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "kiln.h"
#include "nn/functional.h"

namespace kiln {
namespace {

using autograd::TensorList;
namespace F = nn::functional;

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randn(shape, DType::Float64, &gen);
  t.requires_grad_();
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) { return max(abs(a - b)).item<double>(); }

// x -> linear(W1, b1) -> tanh -> linear(W2) -> * (p * p), with W1 also used
// a second time: y = f(x) + linear(x, W1).sum() * 0.5.
struct Net {
  Tensor w1 = leaf({5, 4}, 1), b1 = leaf({5}, 2), w2 = leaf({3, 5}, 3), p = leaf({3}, 4);
  TensorList params() const { return {w1, b1, w2, p}; }
  Tensor forward(const Tensor& x) const {
    Tensor h = tanh(F::linear(x, w1, b1));
    Tensor y = F::linear(h, w2) * (p * p);
    return y + sum(F::linear(x, w1)) * 0.5;
  }
};

TEST(SplitBackward, InputThenWeightEqualsOneBackward) {
  Net a, b;
  Tensor xa = leaf({6, 4}, 9), xb = leaf({6, 4}, 9);
  Tensor g = randn({6, 3}, DType::Float64);
  a.forward(xa).backward(g);
  Tensor y = b.forward(xb);
  autograd::DeferredBackward rest;
  TensorList gx = autograd::backward_input({y}, {xb}, {g}, rest);
  EXPECT_FALSE(rest.empty());
  // I computed the input's gradient and no parameter's.
  EXPECT_LE(max_diff(gx[0], xa.grad()), 1e-14);
  EXPECT_FALSE(xb.grad().defined());
  for (const Tensor& p : b.params()) EXPECT_FALSE(p.grad().defined());
  autograd::backward_weight(std::move(rest));
  const TensorList pa = a.params(), pb = b.params();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_LE(max_diff(pa[i].grad(), pb[i].grad()), 1e-14) << "parameter " << i;
}

TEST(SplitBackward, ConvolutionsSplitToo) {
  Tensor x = leaf({2, 3, 8, 8}, 5), w = leaf({4, 3, 3, 3}, 6), bias = leaf({4}, 7);
  Tensor x2 = x.detach().clone(), w2 = w.detach().clone(), bias2 = bias.detach().clone();
  x2.requires_grad_();
  w2.requires_grad_();
  bias2.requires_grad_();
  sum(F::conv2d(x, w, bias) * F::conv2d(x, w, bias)).backward();
  Tensor out = F::conv2d(x2, w2, bias2);
  autograd::DeferredBackward rest;
  TensorList gx = autograd::backward_input({sum(out * out)}, {x2}, {}, rest);
  EXPECT_LE(max_diff(gx[0], x.grad()), 1e-12);
  EXPECT_FALSE(w2.grad().defined());
  autograd::backward_weight(std::move(rest));
  EXPECT_LE(max_diff(w2.grad(), w.grad()), 1e-12);
  EXPECT_LE(max_diff(bias2.grad(), bias.grad()), 1e-12);
}

// A node that records which of its two inputs' gradients it is asked for.
Tensor asking_node(const Tensor& x, const Tensor& p, std::vector<std::vector<bool>>& asked) {
  Tensor out = autograd::untracked([&] { return x.detach() * p.detach(); });
  autograd::record("asking", {x, p}, {out}, [&asked, x, p](const TensorList& g) -> TensorList {
    const bool want_x = autograd::input_gradient_wanted(0), want_p = autograd::input_gradient_wanted(1);
    asked.push_back({want_x, want_p});
    return {want_x ? g[0] * p.detach() : Tensor(), want_p ? g[0] * x.detach() : Tensor()};
  });
  return out;
}

TEST(SplitBackward, EachGradientIsAskedForOnceInTheHalfThatNeedsIt) {
  std::vector<std::vector<bool>> asked;
  Tensor x = leaf({3}, 1), p = leaf({3}, 2);
  sum(asking_node(x, p, asked)).backward();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::vector<bool>{true, true}));  // an ordinary backward wants both
  asked.clear();
  Tensor x2 = leaf({3}, 1), p2 = leaf({3}, 2);
  autograd::DeferredBackward rest;
  TensorList gx = autograd::backward_input({sum(asking_node(x2, p2, asked))}, {x2}, {}, rest);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::vector<bool>{true, false}));  // I: the input only
  EXPECT_LE(max_diff(gx[0], x.grad()), 0.0);
  autograd::backward_weight(std::move(rest));
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[1], (std::vector<bool>{false, true}));  // W: the parameter only
  EXPECT_LE(max_diff(p2.grad(), p.grad()), 0.0);
  EXPECT_FALSE(x2.grad().defined());
}

TEST(SplitBackward, HooksRunOnceAndUnreachedInputsAreUndefined) {
  Tensor x = leaf({4}, 1), unused = leaf({4}, 2), w = leaf({4}, 3);
  int calls = 0;
  Tensor h = x * w;
  h.register_hook([&calls](const Tensor& g) {
    ++calls;
    return g * 2.0;
  });
  autograd::DeferredBackward rest;
  TensorList got = autograd::backward_input({sum(h * w)}, {x, unused}, {}, rest);
  EXPECT_FALSE(got[1].defined());
  autograd::backward_weight(std::move(rest));
  EXPECT_EQ(calls, 1);
  // d/dw sum(x w w) with the hook doubling the gradient reaching h = x w:
  // 2 * w * x (through h) + x * w (directly).
  EXPECT_LE(max_diff(w.grad(), 3.0 * x.detach() * w.detach()), 1e-14);
  EXPECT_LE(max_diff(got[0], 2.0 * w.detach() * w.detach()), 1e-14);
}

TEST(SplitBackward, AKeptBackwardMustBeFinishedFirst) {
  Tensor x = leaf({2}, 1), w = leaf({2}, 2);
  autograd::DeferredBackward rest;
  autograd::backward_input({sum(x * w)}, {x}, {}, rest);
  try {
    autograd::backward_input({sum(x * w)}, {x}, {}, rest);
    FAIL() << "a DeferredBackward still holding work must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run backward_weight on it first"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
