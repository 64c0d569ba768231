// relu_ under autograd (Note [Recorded in-place ops] in autograd/function.h):
// values and gradients equal to relu's, gradcheck and double backward, the
// history rebased onto the written tensor, the version-counter errors when a
// saved tensor was overwritten, and the refused leaf and view cases.
#include <gtest/gtest.h>

#include "autograd/autograd_test_util.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace kiln {
namespace {

using gradtest::expect_error;
using gradtest::expect_gradcheck;
using gradtest::expect_gradgradcheck;
using gradtest::expect_same;
using gradtest::leaf;
using gradtest::uniform64;

TEST(InplaceGrad, ReluEqualsOutOfPlace) {
  Tensor a = leaf({3, 4}, 1), b = leaf({3, 4}, 1);
  Tensor u = uniform64({3, 4}, 2);
  Tensor h = mul(a, 2.0);  // a non-leaf that requires grad
  const uint64_t version = h.version();
  Tensor& r = relu_(h);
  EXPECT_EQ(&r, &h);
  EXPECT_GT(h.version(), version);
  EXPECT_EQ(h.grad_fn_name(), "ReluBackward");
  Tensor want = relu(mul(b, 2.0));
  expect_same(h, want);
  sum(mul(h, u)).backward();
  sum(mul(want, u)).backward();
  expect_same(a.grad(), b.grad());
}

TEST(InplaceGrad, ReluGradcheck) {
  auto fn = [](const autograd::TensorList& in) {
    Tensor h = mul(in[0], 1.5);
    relu_(h);
    return autograd::TensorList{mul(h, in[0])};
  };
  // Away from 0, where relu has no derivative.
  Tensor x = gradtest::leaf_of({0.5, -0.7, 1.2, -0.3, 0.9, -1.1, 0.4, -0.6, 0.8, -0.2}, {2, 5});
  expect_gradcheck(fn, {x});
  expect_gradgradcheck(fn, {x});
}

TEST(InplaceGrad, OverwritingASavedTensorIsCaught) {
  // sigmoid saves its output; relu_ overwrites it.
  Tensor x = leaf({4}, 4);
  Tensor y = sigmoid(mul(x, 3.0));
  relu_(y);
  expect_error([&] { sum(y).backward(); }, "a tensor saved for backward was modified by an in-place operation");
  // relu_'s own saved output, overwritten afterwards under no_grad.
  Tensor z = mul(x, 2.0);
  relu_(z);
  {
    NoGradGuard no_grad;
    z.mul_(2.0);
  }
  expect_error([&] { sum(z).backward(); }, "a tensor saved for backward was modified by an in-place operation");
}

TEST(InplaceGrad, RefusedCases) {
  Tensor x = leaf({2, 3}, 5);
  expect_error([&] { relu_(x); }, "relu_: a leaf tensor that requires grad is being used in an in-place operation");
  {
    NoGradGuard no_grad;  // a plain write without grad mode, as an optimizer's
    Tensor before = x.detach().clone();
    relu_(x);
    expect_same(x, relu(before));
  }
  Tensor h = mul(x, 1.0);
  Tensor v = h.select(0, 1);
  expect_error([&] { relu_(v); }, "relu_: in-place operation on a tensor that requires grad and shares its memory");
  expect_error([&] { relu_(h); }, "relu_: in-place operation on a tensor that requires grad and shares its memory");
  Tensor s = h.select(0, 0);  // a sibling of v
  expect_error([&] { relu_(s); }, "shares its memory");
}

TEST(InplaceGrad, AViewWhoseBaseIsGoneIsWritable) {
  Tensor x = leaf({2, 3}, 6), x2 = leaf({2, 3}, 6);
  Tensor v = mul(x, 1.0).unsqueeze(0);  // the base is a temporary
  relu_(v);
  sum(v).backward();
  sum(relu(x2)).backward();
  expect_same(x.grad(), x2.grad());
  // Once the other views are gone, the base is writable again.
  Tensor h = mul(x, 1.0);
  { Tensor view = h.view({3, 2}); }
  relu_(h);
  EXPECT_EQ(h.grad_fn_name(), "ReluBackward");
}

TEST(InplaceGrad, NoGradInputIsAPlainWrite) {
  Tensor x = uniform64({3}, 7);
  relu_(x);
  EXPECT_FALSE(x.requires_grad());
  EXPECT_EQ(x.grad_fn_name(), "");
}

}  // namespace
}  // namespace kiln
