// DataParallel with CPU replicas on threads (Note [DataParallel steps]):
// the original module ends each backward with the gradient of the whole
// batch, so training equals single-replica training. float64, as in
// ddp_test.cpp, so that 100 steps compare the maths and not rounding.
#include <gtest/gtest.h>

#include <string>

#include "distributed/data_parallel.h"
#include "kiln.h"
#include "nn/functional.h"
#include "nn/models/lenet.h"
#include "optim/sgd.h"
#include "store_test_util.h"
#include "training_test_util.h"

namespace kiln::distributed {
namespace {

namespace F = nn::functional;
using testing::batch_for;
using testing::error_of;
using testing::make_lenet;
using testing::max_difference;

void train(nn::Module& model, int steps, int64_t batch) {
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_for(s, batch);
    opt.zero_grad();
    F::cross_entropy(model(x), y).backward();
    opt.step();
  }
}

void expect_replicas_train_as_one(int replicas, int steps, int64_t batch) {
  // The replicas start from other weights: each forward gives them the original's.
  int made = 0;
  DataParallel dp(make_lenet(3), [&] { return make_lenet(100 + made++); }, std::vector<Device>(replicas, kCPU));
  EXPECT_EQ(made, replicas - 1);
  EXPECT_EQ(dp.parameters().size(), dp.module().parameters().size());  // the optimizer sees the original only
  train(dp, steps, batch);
  auto reference = make_lenet(3);
  train(*reference, steps, batch);
  EXPECT_LE(max_difference(dp.module(), *reference), 1e-10) << replicas << " replicas, batch " << batch;
}

TEST(DataParallel, TwoCpuReplicasTrainAsOneModuleFor100Steps) { expect_replicas_train_as_one(2, 100, 8); }

TEST(DataParallel, UnevenChunksAndFewerRowsThanReplicas) {
  expect_replicas_train_as_one(3, 10, 8);  // chunks of 3, 3 and 2
  expect_replicas_train_as_one(3, 5, 2);   // two chunks of 1; the third replica idles
}

TEST(DataParallel, GradientsAccumulateOverBackwardsLikeTheModuleAlone) {
  DataParallel dp(make_lenet(4), [] { return make_lenet(5); }, {kCPU, kCPU});
  auto reference = make_lenet(4);
  for (int s = 0; s < 2; ++s) {  // two backward passes without zero_grad
    auto [x, y] = batch_for(s, 6);
    F::cross_entropy(dp(x), y).backward();
    F::cross_entropy((*reference)(x), y).backward();
  }
  const auto a = dp.module().parameters(), b = reference->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(max(abs(a[i].grad() - b[i].grad())).item<double>(), 1e-12) << "parameter " << i;
  }
}

TEST(DataParallel, TheOriginalsHooksRunOnceAroundTheWholeBatch) {
  DataParallel dp(make_lenet(4), [] { return make_lenet(5); }, {kCPU, kCPU});
  auto reference = make_lenet(4);
  std::vector<int64_t> rows_seen;
  int backward_runs = 0;
  auto doubled = [](nn::Module&, const Tensor&, const Tensor& out) { return mul(out, 2.0); };
  dp.module().register_forward_pre_hook([&](nn::Module&, const Tensor& x) { rows_seen.push_back(x.size(0)); });
  dp.module().register_forward_hook(doubled);
  dp.module().register_full_backward_hook(
      [&](nn::Module&, const nn::TensorList&, const nn::TensorList&) { ++backward_runs; });
  reference->register_forward_hook(doubled);
  auto [x, y] = batch_for(0, 6);
  F::cross_entropy(dp(x), y).backward();
  F::cross_entropy((*reference)(x), y).backward();
  EXPECT_EQ(rows_seen, std::vector<int64_t>{6});  // once, with the whole batch
  EXPECT_EQ(backward_runs, 1);
  // The doubled output of the whole batch, not of replica 0's half.
  const auto a = dp.module().parameters(), b = reference->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(max(abs(a[i].grad() - b[i].grad())).item<double>(), 1e-12) << "parameter " << i;
  }
}

TEST(DataParallel, ErrorsNameTheReplicaAndTheMismatch) {
  EXPECT_NE(error_of([] { DataParallel(make_lenet(1), {}, {kCPU, kCPU}); })
                .find("DataParallel: 2 devices need a factory for the other replicas"),
            std::string::npos);
  const std::string mismatch = error_of([] {
    DataParallel(make_lenet(1), [] { return std::make_shared<nn::Linear>(2, 2); }, {kCPU, kCPU});
  });
  EXPECT_NE(mismatch.find("DataParallel: replica 1 from the factory has parameters [weight, bias]"),
            std::string::npos)
      << mismatch;
  DataParallel dp(make_lenet(1), [] { return make_lenet(2); }, {kCPU, kCPU});
  const std::string failed = error_of([&] { dp(zeros({4, 5, 32, 32}, DType::Float64)); });
  EXPECT_NE(failed.find("DataParallel: replica 0 on cpu failed: "), std::string::npos) << failed;
  EXPECT_NE(error_of([&] { dp(zeros({}, DType::Float64)); }).find("DataParallel: the input must have a batch"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::distributed
