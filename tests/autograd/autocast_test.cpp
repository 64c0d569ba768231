// Autocast (autograd/autocast.h): the state and its guard, the dtype each op
// list runs in, gradients reaching float32 parameters, and the region's
// cache of parameter copies. Everything runs on the CPU, whose autocast
// takes bfloat16 and float16 alike.
#include "autograd/autocast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

// A float32 tensor with values uniform in [-1, 1).
Tensor uniform32(const Shape& shape, uint64_t seed) { return uniform64(shape, seed).to(DType::Float32); }

// Every element of got within rel * max|expected| of expected.
void expect_close_to_largest(const Tensor& got, const Tensor& expected, double rel) {
  std::vector<double> g = values(got), e = values(expected);
  ASSERT_EQ(g.size(), e.size());
  double largest = 0;
  for (double v : e) largest = std::max(largest, std::abs(v));
  for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], e[k], rel * largest) << "element " << k;
}

TEST(Autocast, DefaultsGuardsAndNesting) {
  EXPECT_FALSE(autocast_enabled(DeviceType::CPU));
  EXPECT_FALSE(autocast_enabled(DeviceType::CUDA));
  EXPECT_EQ(autocast_dtype(DeviceType::CPU), DType::BFloat16);
  EXPECT_EQ(autocast_dtype(DeviceType::CUDA), DType::Float16);
  {
    AutocastGuard outer(DeviceType::CPU, DType::Float16);
    EXPECT_TRUE(autocast_enabled(DeviceType::CPU));
    EXPECT_EQ(autocast_dtype(DeviceType::CPU), DType::Float16);
    EXPECT_FALSE(autocast_enabled(DeviceType::CUDA));
    {
      AutocastGuard off(DeviceType::CPU, /*enabled=*/false);
      EXPECT_FALSE(autocast_enabled(DeviceType::CPU));
      EXPECT_EQ(autocast_dtype(DeviceType::CPU), DType::Float16);  // kept
      EXPECT_FALSE(autograd::any_autocast_enabled());
      EXPECT_EQ(mm(uniform32({2, 3}, 1), uniform32({3, 2}, 2)).dtype(), DType::Float32);
    }
    EXPECT_TRUE(autocast_enabled(DeviceType::CPU));
    {
      AutocastGuard inner(DeviceType::CPU, DType::BFloat16);
      EXPECT_EQ(mm(uniform32({2, 3}, 1), uniform32({3, 2}, 2)).dtype(), DType::BFloat16);
    }
    EXPECT_EQ(mm(uniform32({2, 3}, 1), uniform32({3, 2}, 2)).dtype(), DType::Float16);
  }
  EXPECT_FALSE(autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(autocast_dtype(DeviceType::CPU), DType::BFloat16);
  EXPECT_FALSE(autograd::any_autocast_enabled());
}

TEST(Autocast, RefusesDtypesOtherThanTheTwo16BitFloats) {
  expect_error([] { AutocastGuard g(DeviceType::CPU, DType::Float32); },
               "autocast: the autocast dtype must be float16 or bfloat16, got float32");
  expect_error([] { set_autocast_dtype(DeviceType::CUDA, DType::Float64); },
               "autocast: the autocast dtype must be float16 or bfloat16, got float64");
  EXPECT_FALSE(autocast_enabled(DeviceType::CPU));  // the failed guard changed nothing
}

TEST(Autocast, LowerPrecisionOpsRunInTheAutocastDtype) {
  Tensor a = uniform32({4, 3}, 1), b = uniform32({3, 5}, 2);
  Tensor a3 = uniform32({2, 4, 3}, 3), b3 = uniform32({2, 3, 5}, 4);
  Tensor w = uniform32({5, 3}, 5), bias = uniform32({5}, 6);
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    AutocastGuard autocast(DeviceType::CPU, dtype);
    Tensor y = mm(a, b);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(bmm(a3, b3).dtype(), dtype);
    EXPECT_EQ(matmul(a3, b).dtype(), dtype);
    EXPECT_EQ(linear(a, w, bias).dtype(), dtype);
    // The product of the rounded inputs, not of the float32 ones.
    Tensor expected = ops::mm(a.to(dtype), b.to(dtype));
    expect_same(y, expected);
  }
  EXPECT_EQ(mm(a, b).dtype(), DType::Float32);  // outside the region
}

TEST(Autocast, Float32OpsCastSixteenBitInputsUp) {
  Tensor x = uniform32({3, 4}, 7).to(DType::BFloat16);
  Tensor positive = ops::add(ops::abs(x), 0.5);
  AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
  EXPECT_EQ(exp(x).dtype(), DType::Float32);
  EXPECT_EQ(log(positive).dtype(), DType::Float32);
  EXPECT_EQ(rsqrt(positive).dtype(), DType::Float32);
  EXPECT_EQ(pow(x, 2).dtype(), DType::Float32);
  EXPECT_EQ(pow(positive, x).dtype(), DType::Float32);
  EXPECT_EQ(sum(x).dtype(), DType::Float32);
  EXPECT_EQ(sum(x, {1}).dtype(), DType::Float32);
  EXPECT_EQ(prod(x, {1}).dtype(), DType::Float32);
  EXPECT_EQ(softmax(x, 1).dtype(), DType::Float32);
  EXPECT_EQ(log_softmax(x, 1).dtype(), DType::Float32);
  EXPECT_EQ(logsumexp(x, {1}).dtype(), DType::Float32);
  // The float32 result is that of the float32 op on the same (bfloat16) values.
  expect_same(softmax(x, 1), ops::softmax(x.to(DType::Float32), 1));
  // An explicit dtype is the caller's choice, as torch's sum(dtype=...).
  EXPECT_EQ(sum(x, {1}, false, DType::BFloat16).dtype(), DType::BFloat16);
  // Ops on no list keep their input's dtype: mean, relu, the views.
  EXPECT_EQ(mean(x).dtype(), DType::BFloat16);
  EXPECT_EQ(relu(x).dtype(), DType::BFloat16);
  EXPECT_EQ(tanh(x).dtype(), DType::BFloat16);
  // float32 and float64 inputs are left as they are.
  Tensor x64 = uniform64({3, 4}, 8);
  EXPECT_EQ(exp(x64).dtype(), DType::Float64);
  EXPECT_EQ(exp(x.to(DType::Float32)).dtype(), DType::Float32);
}

TEST(Autocast, MixedDtypesRunInTheWidest) {
  Tensor h = uniform32({2, 3}, 9).to(DType::BFloat16), f = uniform32({2, 3}, 10);
  AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
  EXPECT_EQ(add(h, f).dtype(), DType::Float32);
  EXPECT_EQ(mul(h, f).dtype(), DType::Float32);
  EXPECT_EQ(cat({h, f}, 0).dtype(), DType::Float32);
  EXPECT_EQ(stack({h, f}, 0).dtype(), DType::Float32);
  EXPECT_EQ(where(ops::gt(f, 0), h, f).dtype(), DType::Float32);
  EXPECT_EQ(add(h, h).dtype(), DType::BFloat16);
  // scatter_add needs one dtype: autocast promotes the two.
  Tensor index = from_vector<int64_t>({0, 1, 0, 1, 0, 1}, {2, 3});
  Tensor out = scatter_add(h, 0, index, f);
  EXPECT_EQ(out.dtype(), DType::Float32);
  expect_same(out, ops::scatter_add(h.to(DType::Float32), 0, index, f));
}

TEST(Autocast, ScatterAddOfTwoDtypesFailsOutsideTheRegion) {
  Tensor h = uniform32({2, 3}, 9).to(DType::BFloat16), f = uniform32({2, 3}, 10);
  Tensor index = from_vector<int64_t>({0, 1, 0, 1, 0, 1}, {2, 3});
  expect_error([&] { scatter_add(h, 0, index, f); }, "scatter_add: src must have x's dtype");
}

TEST(Autocast, IntegerFloat64AndOtherDeviceTensorsAreNeverCast) {
  Tensor i = from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  Tensor d = uniform64({2, 2}, 11), f = uniform32({2, 2}, 12);
  {
    AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
    EXPECT_EQ(mm(i, i).dtype(), DType::Int64);
    EXPECT_EQ(sum(i).dtype(), DType::Int64);
    EXPECT_EQ(mm(d, d).dtype(), DType::Float64);
  }
  {
    // Autocast for CUDA leaves CPU tensors alone.
    AutocastGuard autocast(DeviceType::CUDA, DType::Float16);
    EXPECT_EQ(mm(f, f).dtype(), DType::Float32);
    EXPECT_EQ(exp(f.to(DType::Float16)).dtype(), DType::Float16);
  }
}

TEST(Autocast, GradientsReachFloat32ParametersAsFloat32) {
  // y = linear(x, w, b) in bfloat16; loss = sum(y * y) in float32.
  Tensor x64 = uniform64({6, 4}, 13), w64 = uniform64({3, 4}, 14), b64 = uniform64({3}, 15);
  Tensor x = x64.to(DType::Float32), w = w64.to(DType::Float32).requires_grad_(),
         b = b64.to(DType::Float32).requires_grad_();
  Tensor loss;
  {
    AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), DType::BFloat16);
    loss = sum(mul(y, y));
    EXPECT_EQ(loss.dtype(), DType::Float32);
  }
  loss.backward();
  ASSERT_TRUE(w.grad().defined() && b.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_EQ(b.grad().dtype(), DType::Float32);

  // float64 reference: dL/dy = 2y, dL/dw = 2 y^T x, dL/db = 2 sum_rows(y).
  Tensor y64 = ops::linear(x64, w64, b64);
  Tensor gw64 = ops::mul(ops::mm(y64.t(), x64), 2.0), gb64 = ops::mul(ops::sum(y64, {0}), 2.0);
  // bfloat16 keeps 8 significant bits: 0.4% per rounding, a few roundings
  // deep, relative to the largest gradient (elements that cancel keep the
  // absolute error of their terms).
  expect_close_to_largest(w.grad(), gw64, 0.02);
  expect_close_to_largest(b.grad(), gb64, 0.02);
  // And not the float32 answer by accident: bfloat16 rounding shows.
  Tensor w32 = w64.to(DType::Float32).requires_grad_();
  sum(mul(linear(x, w32, b64.to(DType::Float32)), linear(x, w32, b64.to(DType::Float32)))).backward();
  EXPECT_GT(ops::amax(ops::abs(ops::sub(w.grad(), w32.grad()))).item<double>(), 1e-5);
}

TEST(Autocast, GradientThroughFloat32OpsOfSixteenBitActivations) {
  // softmax casts its bfloat16 input up: the gradient flows back down to
  // the bfloat16 activation and on to the float32 weight.
  Tensor x = uniform32({4, 3}, 16), w = uniform32({5, 3}, 17).requires_grad_();
  Tensor target = from_vector<int64_t>({0, 4, 2, 1}, {4});
  Tensor loss;
  {
    AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
    Tensor logp = log_softmax(linear(x, w), 1);
    EXPECT_EQ(logp.dtype(), DType::Float32);
    loss = neg(mean(gather(logp, 1, target.unsqueeze(1))));
  }
  loss.backward();
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  // float64 reference: dL/dlogits = (softmax - onehot) / N.
  Tensor x64 = x.to(DType::Float64), w64 = w.detach().to(DType::Float64);
  Tensor p = ops::softmax(ops::mm(x64, w64.t()), 1);
  Tensor g = ops::div(ops::sub(p, ops::one_hot(target, 5).to(DType::Float64)), 4.0);
  expect_close_to_largest(w.grad(), ops::mm(g.t(), x64), 0.03);
}

TEST(Autocast, ParameterCopiesAreCachedWithinARegion) {
  Tensor x = uniform32({2, 3}, 18), w = uniform32({4, 3}, 19).requires_grad_();
  Tensor loss;
  {
    AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
    Tensor y1 = linear(x, w), y2 = linear(ops::mul(x, 2.0), w);
    loss = add(sum(y1), sum(y2));
  }
  loss.backward();
  // Both uses send their gradient to w: d/dw of sum(x w^T) + sum(2x w^T) = 3 * column sums of x.
  expect_close_to_largest(w.grad(), ops::mul(ops::sum(x, {0}, true), 3.0).expand({4, 3}), 0.02);
}

TEST(Autocast, CachedCopiesShareOneConversionAndFollowTheVersion) {
  Tensor w = uniform32({3, 3}, 20).requires_grad_();
  Tensor x = uniform32({3, 3}, 21);
  AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
  std::array<Tensor, 2> uses{w, w};
  ASSERT_TRUE(autograd::autocast_cast(autograd::AutocastPolicy::LowerPrecision, uses));
  EXPECT_EQ(uses[0].dtype(), DType::BFloat16);
  EXPECT_EQ(uses[0].data_ptr(), uses[1].data_ptr());  // one conversion
  EXPECT_NE(uses[0].grad_fn_name(), "");              // each with its own history
  // Two forward/backward passes in one region: each use records its own
  // node, so the second backward works.
  for (int pass = 0; pass < 2; ++pass) {
    w.set_grad(Tensor());
    sum(mm(x, w)).backward();
    EXPECT_EQ(w.grad().dtype(), DType::Float32);
  }
  // An in-place change of w (an optimizer step) makes the next use convert again.
  Tensor y_before = mm(x, w).detach();
  {
    NoGradGuard no_grad;
    ops::mul_(w, 2.0);
  }
  Tensor y_after = mm(x, w).detach();
  expect_same(y_after, ops::mm(x.to(DType::BFloat16), w.detach().to(DType::BFloat16)));
  EXPECT_GT(ops::amax(ops::abs(ops::sub(y_after, y_before))).item<double>(), 0.0);
}

// A storage swap keeps the version (Note [Swapping a tensor's storage]) but
// changes the memory and the shape, so the cached copy is not reused.
TEST(Autocast, CachedCopiesFollowAStorageSwap) {
  Tensor w = uniform32({2, 3}, 26).requires_grad_(), x = uniform32({4, 3}, 27);
  Tensor gathered = uniform32({6}, 28);
  Tensor shard = gathered.narrow(0, 3, 3).clone();
  AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
  Tensor before = linear(x, w).detach();
  uint64_t version = w.version();
  w.impl()->set_storage(gathered, {2, 3});
  ASSERT_EQ(w.version(), version);
  expect_same(linear(x, w).detach(), ops::linear(x.to(DType::BFloat16), gathered.view({2, 3}).to(DType::BFloat16)));
  EXPECT_GT(ops::amax(ops::abs(ops::sub(linear(x, w).detach(), before))).item<double>(), 0.0);
  w.impl()->set_storage(shard, {3});
  Tensor y = matmul(w, x.t());  // (3) @ (3, 4)
  EXPECT_EQ(y.shape(), (Shape{4}));
  expect_same(y.detach(), ops::matmul(shard.to(DType::BFloat16), x.t().to(DType::BFloat16)));
}

TEST(Autocast, NestedRegionsOfTheTwoDtypesGetTheirOwnCopies) {
  Tensor w = uniform32({3, 3}, 24).requires_grad_(), x = uniform32({3, 3}, 25);
  AutocastGuard outer(DeviceType::CPU, DType::BFloat16);
  EXPECT_EQ(mm(x, w).dtype(), DType::BFloat16);
  {
    AutocastGuard inner(DeviceType::CPU, DType::Float16);
    EXPECT_EQ(mm(x, w).dtype(), DType::Float16);
  }
  EXPECT_EQ(mm(x, w).dtype(), DType::BFloat16);
}

TEST(Autocast, NoCacheWithoutGradMode) {
  // A copy made under no_grad has no history; reused later with grad on, it
  // would cut w off from its gradient.
  Tensor w = uniform32({3, 3}, 22).requires_grad_(), x = uniform32({3, 3}, 23);
  AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
  {
    NoGradGuard no_grad;
    EXPECT_EQ(mm(x, w).dtype(), DType::BFloat16);
  }
  sum(mm(x, w)).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
}

}  // namespace
}  // namespace kiln::gradtest
