// What backward sees of Note [Version counter] and Note [Swapping a tensor's
// storage]: a saved tensor is checked against the counter it shares with its
// views, and a parameter keeps that counter while FSDP swaps its memory
// between its 1-d shard and a gathered full buffer.
#include <gtest/gtest.h>

#include <vector>

#include "kiln.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

TEST(VersionCounter, AWriteThroughAnyViewOfASavedTensorIsDetected) {
  Tensor w = from_vector<double>({1, 2, 3, 4}).requires_grad_();
  Tensor x = from_vector<double>({5, 6, 7, 8});
  std::vector<Tensor> views = {x.slice(0, 1, 3), x.detach(), x.view({2, 2}).t()};
  for (Tensor view : views) {
    Tensor y = sum(w * x);  // mul saves x for w's gradient
    uint64_t saved = x.version();
    ops::add_(view, 0.0);
    expect_error([&] { y.backward(); }, "MulBackward: a tensor saved for backward was modified by an in-place "
                                        "operation (it is at version " +
                                            std::to_string(saved + 1) + ", it was saved at version " +
                                            std::to_string(saved) + ")");
  }
}

TEST(VersionCounter, AWriteToACopyOfASavedTensorIsNot) {
  Tensor w = from_vector<double>({1, 2, 3, 4}).requires_grad_();
  Tensor x = from_vector<double>({5, 6, 7, 8}, {2, 2}).t();
  Tensor y = sum(w.view({2, 2}) * x);
  Tensor cloned = x.clone();
  Tensor packed = x.contiguous();
  ops::add_(cloned, 1.0);
  ops::add_(packed, 1.0);
  y.backward();
  EXPECT_EQ(w.grad().at<double>({1}), 7.0);  // x[0][1] = 7
}

// One process playing rank 0 of two: a (2, 3) parameter whose 6 values are
// split into a shard of 3 per rank. gather() all-gathers into `buffer` as a
// collective would, one copy per rank, and returns the full parameter's view.
struct TwoRankParameter {
  Tensor param;          // what a module and the optimizer hold
  Tensor local_shard;    // rank 0's 3 values
  Tensor remote_shard;   // rank 1's 3 values, as it would arrive
  std::vector<double> values = {0.5, -1.0, 2.0, 1.5, -0.5, 0.25};

  TwoRankParameter() {
    param = from_vector<double>(values, {2, 3}).to(DType::Float32).requires_grad_();
    Tensor flat = param.detach().view({6});
    local_shard = flat.narrow(0, 0, 3).clone();
    remote_shard = flat.narrow(0, 3, 3).clone();
    param.impl()->set_storage(local_shard, {3});
  }

  void gather_into(Tensor buffer) {
    NoGradGuard no_grad;
    buffer.narrow(0, 0, 3).copy_(param);  // the parameter is its shard here
    buffer.narrow(0, 3, 3).copy_(remote_shard);
    param.impl()->set_storage(buffer, {2, 3});
  }
  void reshard() { param.impl()->set_storage(local_shard, {3}); }
};

// The FSDP pattern: gathered before forward, which saves the full
// parameter; resharded after forward; gathered again before backward. The
// gather buffer is reused, as FSDP reuses its all-gather buffer, so the
// buffer has been written more times at backward than when the forward saved
// the parameter: a counter on the storage read that as an in-place write.
TEST(VersionCounter, ASwapToTheShardAndBackInsideForwardBackwardGivesTheRightGradient) {
  TwoRankParameter p;
  Tensor buffer = zeros({6});
  Tensor x = from_vector<double>({0.5, -1, 2, 1, 3, -0.5, 0.25, 1, -2, 1.5, 0.75, -1.25}, {4, 3})
                 .to(DType::Float32)
                 .requires_grad_();
  Tensor c = from_vector<double>({1, -1, 2, 0.5, -0.5, 1.5, 3, -2}, {4, 2}).to(DType::Float32);  // dloss/dy

  p.gather_into(buffer);
  Tensor y = linear(x, p.param);  // (4, 2); saves the (2, 3) parameter for x's gradient
  Tensor loss = sum(y * c);
  p.reshard();
  EXPECT_EQ(p.param.shape(), (Shape{3}));
  p.gather_into(buffer);
  EXPECT_EQ(p.param.shape(), (Shape{2, 3}));
  loss.backward();

  // float64 reference: dloss/dx[n][i] = sum_o c[n][o] W[o][i]; dloss/dW[o][i] = sum_n c[n][o] x[n][i].
  Tensor x64 = x.detach().to(DType::Float64), c64 = c.to(DType::Float64);
  for (int64_t n = 0; n < 4; ++n) {
    for (int64_t i = 0; i < 3; ++i) {
      double expected = 0;
      for (int64_t o = 0; o < 2; ++o) expected += c64.at<double>({n, o}) * p.values[o * 3 + i];
      EXPECT_NEAR(x.grad().at<float>({n, i}), expected, 1e-5) << "x.grad[" << n << "][" << i << "]";
    }
  }
  ASSERT_EQ(p.param.grad().shape(), (Shape{2, 3}));
  for (int64_t o = 0; o < 2; ++o) {
    for (int64_t i = 0; i < 3; ++i) {
      double expected = 0;
      for (int64_t n = 0; n < 4; ++n) expected += c64.at<double>({n, o}) * x64.at<double>({n, i});
      EXPECT_NEAR(p.param.grad().at<float>({o, i}), expected, 1e-5) << "w.grad[" << o << "][" << i << "]";
    }
  }
}

// An optimizer step on the shard between forward and backward changes the
// values the forward used. Each gather goes to a fresh buffer, written as
// many times as the forward's: a counter on the storage saw nothing.
TEST(VersionCounter, AWriteToTheParameterWhileItIsAShardIsDetectedAtBackward) {
  TwoRankParameter p;
  Tensor x = from_vector<double>({1, 2, 3}, {1, 3}).to(DType::Float32).requires_grad_();
  p.gather_into(zeros({6}));
  uint64_t saved = p.param.version();
  Tensor loss = sum(linear(x, p.param));
  p.reshard();
  {
    NoGradGuard no_grad;
    ops::sub_(p.param, 0.1);  // the step, through the parameter's handle
  }
  p.gather_into(zeros({6}));
  expect_error([&] { loss.backward(); }, "LinearBackward: a tensor saved for backward was modified by an in-place "
                                         "operation (it is at version " +
                                             std::to_string(saved + 1) + ", it was saved at version " +
                                             std::to_string(saved) + ")");
}

}  // namespace
}  // namespace kiln
