// The Tensor view methods and copies are differentiable (Note [Autograd
// hooks]): gradcheck each, on contiguous and non-contiguous inputs, and
// their second derivatives.
#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;

autograd::GradcheckFn lift(const UnaryFn& f) {
  return [f](const TensorList& in) { return TensorList{f(in[0])}; };
}

// Views of a (2, 3, 4) input, each checked by gradcheck, with the grad_fn
// name torch gives.
std::vector<std::tuple<const char*, UnaryFn, const char*>> view_cases() {
  return {
      {"view", [](const Tensor& x) { return x.contiguous().view({6, 4}); }, "ViewBackward"},
      {"reshape", [](const Tensor& x) { return x.reshape({4, -1}); }, nullptr},
      {"permute", [](const Tensor& x) { return x.permute({2, 0, 1}); }, "PermuteBackward"},
      {"transpose", [](const Tensor& x) { return x.transpose(0, 2); }, "TransposeBackward"},
      {"narrow", [](const Tensor& x) { return x.narrow(2, 1, 2); }, "NarrowBackward"},
      {"slice", [](const Tensor& x) { return x.slice(-1, 0, 4, 3); }, "SliceBackward"},
      {"select", [](const Tensor& x) { return x.select(1, -1); }, "SelectBackward"},
      {"expand", [](const Tensor& x) { return x.narrow(1, 0, 1).expand({2, 2, 3, 4}); }, "ExpandBackward"},
      {"squeeze", [](const Tensor& x) { return x.narrow(1, 1, 1).squeeze(); }, "SqueezeBackward"},
      {"squeeze_dim", [](const Tensor& x) { return x.narrow(0, 1, 1).squeeze(0); }, "SqueezeBackward"},
      {"unsqueeze", [](const Tensor& x) { return x.unsqueeze(1); }, "UnsqueezeBackward"},
      {"flatten", [](const Tensor& x) { return x.flatten(1); }, nullptr},
      {"t", [](const Tensor& x) { return x.select(0, 1).t(); }, "TransposeBackward"},
      {"contiguous", [](const Tensor& x) { return x.transpose(0, 1).contiguous(); }, "ContiguousBackward"},
      {"clone", [](const Tensor& x) { return x.clone(); }, "CloneBackward"},
      {"chained", [](const Tensor& x) { return x.permute({1, 0, 2}).reshape({3, 8}).slice(1, 1, 7, 2).t(); },
       nullptr},
  };
}

TEST(ViewGrad, EveryViewPassesGradcheck) {
  for (const auto& [name, fn, grad_fn] : view_cases()) {
    SCOPED_TRACE(name);
    expect_gradcheck(lift(fn), {leaf({2, 3, 4}, 1)});
    expect_gradcheck(lift(fn), {transposed_leaf({2, 3, 4}, 2)});
    expect_gradcheck(lift(fn), {strided_leaf({2, 3, 4}, 3)});
    expect_gradgradcheck(lift(fn), {leaf({2, 3, 4}, 4)});
    if (grad_fn != nullptr) {
      EXPECT_EQ(fn(leaf({2, 3, 4}, 5)).grad_fn_name(), grad_fn);
    }
  }
}

TEST(ViewGrad, ViewGradientsLandWhereTheViewLooked) {
  Tensor x = leaf({2, 3}, 6);
  x.select(1, 2).backward(from_vector<double>({5, 7}, {2}));
  expect_values(x.grad(), {0, 0, 5, 0, 0, 7});

  Tensor y = leaf({3}, 7);
  sum(y.unsqueeze(0).expand({4, 3})).backward();
  expect_values(y.grad(), {4, 4, 4});
}

TEST(ViewGrad, AReshapedContiguousTensorGetsItsGradientWithoutACopy) {
  // The view's gradient, reshaped, is the base's: the same memory, not
  // zeros with the gradient copied in.
  Tensor x = leaf({2, 3, 4}, 19);
  Tensor base = mul(x, 2.0);
  Tensor flat = base.flatten(1);
  const void* at_flat = nullptr;
  const void* at_base = nullptr;
  flat.register_hook([&](const Tensor& g) {
    at_flat = g.data_ptr();
    return Tensor();
  });
  base.register_hook([&](const Tensor& g) {
    at_base = g.data_ptr();
    return Tensor();
  });
  sum(mul(flat, flat)).backward();  // d/dflat = 2 * flat, a fresh contiguous tensor
  ASSERT_NE(at_flat, nullptr);
  EXPECT_EQ(at_base, at_flat);
  // d/dx sum((2x)^2) = 8x
  expect_same(x.grad(), mul(x.detach(), 8.0));
  // A view that drops elements still scatters into zeros.
  Tensor y = leaf({2, 3}, 20);
  sum(mul(y, 3.0).narrow(1, 0, 2)).backward();
  expect_values(y.grad(), {3, 3, 0, 3, 3, 0});
}

TEST(ViewGrad, AsStridedOfAContiguousTensor) {
  UnaryFn fn = [](const Tensor& x) { return x.as_strided({2, 2}, {1, 3}, x.storage_offset() + 1); };
  expect_gradcheck(lift(fn), {leaf({2, 3}, 8)});
  expect_gradgradcheck(lift(fn), {leaf({2, 3}, 9)});
  Tensor x = leaf({2, 3}, 10);
  sum(fn(x)).backward();
  expect_values(x.grad(), {0, 1, 1, 0, 1, 1});
}

TEST(ViewGrad, AsStridedThatCannotBeReplayedFailsInBackward) {
  Tensor base = transposed_leaf({3, 2}, 11);
  Tensor y = base.as_strided({2}, {1}, base.storage_offset());
  expect_error([&] { sum(y).backward(); }, "as_strided: cannot backpropagate through this view");
  Tensor x = leaf({3}, 12);
  Tensor overlapping = x.as_strided({2, 3}, {0, 1}, 0);
  expect_error([&] { sum(overlapping).backward(); }, "as_strided: cannot backpropagate through this view");
}

TEST(ViewGrad, ToAnotherDtypeAndBack) {
  // Finite differences through float32 need a large step: float32 rounding
  // of values near 1 is 6e-8, which eps = 1e-2 turns into a 3e-6 error.
  GradcheckOptions coarse;
  coarse.eps = 1e-2;
  expect_gradcheck(lift([](const Tensor& x) { return x.to(DType::Float32); }), {leaf({2, 3}, 13)}, coarse);
  expect_gradcheck(lift([](const Tensor& x) { return mul(x.to(DType::Float32), 2.0).to(DType::Float64); }),
                   {transposed_leaf({2, 3}, 14)}, coarse);
  expect_gradcheck(lift([](const Tensor& x) { return x.to(DType::Float64); }), {leaf({2, 3}, 15)});

  Tensor x = leaf({3}, 16);
  Tensor y = x.to(DType::Float32);
  EXPECT_EQ(y.grad_fn_name(), "ToBackward");
  sum(y).backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float64);
  expect_values(x.grad(), {1, 1, 1});
}

TEST(ViewGrad, ViewsOfTensorsWithoutGradRecordNothing) {
  Tensor x = uniform64({2, 3}, 17);
  EXPECT_TRUE(x.t().is_leaf());
  EXPECT_FALSE(x.reshape({3, 2}).requires_grad());
  Tensor w = leaf({2, 3}, 18);
  NoGradGuard no_grad;
  EXPECT_FALSE(w.t().requires_grad());
  EXPECT_FALSE(w.clone().requires_grad());
}

}  // namespace
}  // namespace kiln::gradtest
