// DistributedDataParallel against single-process training: N ranks with a
// per-rank batch of B / N must take the steps one process takes with batch
// B. The models train in float64 so that the comparison measures the maths,
// not float32's chaos over 100 steps (Note [Parity and float32 chaos] in
// tests/optim/lenet_parity_test.cpp). Every rank process also trains the
// single-process reference itself, on the whole batch.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/ddp/training_helpers.h"
#include "multi_process.h"
#include "nn/container.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/models/lenet.h"
#include "nn/normalization.h"
#include "optim/sgd.h"
#include "store_test_util.h"
#include "training_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace kiln::distributed::testing {
namespace {

namespace F = nn::functional;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout(20000);

// Rows [rank * n / world, (rank + 1) * n / world) of `t`.
Tensor shard(const Tensor& t, int rank, int world) {
  const int64_t n = t.shape()[0];
  const int64_t begin = rank * n / world, end = (rank + 1) * n / world;
  return t.narrow(0, begin, end - begin);
}

optim::SGDOptions sgd() {
  optim::SGDOptions o = optim::SGDOptions(0.05).momentum(0.9);
  return o;
}

// Trains `model` for `steps` SGD steps on the whole batches.
void train_single(nn::Module& model, int steps, int64_t batch) {
  optim::SGD opt(model.parameters(), sgd());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_for(s, batch);
    opt.zero_grad();
    F::cross_entropy(model.forward(x), y).backward();
    opt.step();
  }
}

DDPOptions small_buckets(std::shared_ptr<ProcessGroup> group) {
  DDPOptions o;
  o.group = std::move(group);
  // Several buckets for LeNet's 62k parameters (0.5 MB in float64).
  o.first_bucket_cap_bytes = 8 << 10;
  o.bucket_cap_bytes = 128 << 10;
  return o;
}

RankOptions slow_ranks() {
  RankOptions options;
  options.deadline = std::chrono::seconds(120);
  return options;
}

DDPOptions on(std::shared_ptr<ProcessGroup> group) {
  DDPOptions options;
  options.group = std::move(group);
  return options;
}

void expect_ddp_matches_single_process(int world, int steps, int64_t batch) {
  run_on_ranks(
      world,
      [=](int rank) {
        auto group = make_test_group("gloo", kTimeout);
        // Each rank starts from other weights: DDP must take rank 0's.
        auto ddp = std::make_shared<DistributedDataParallel>(make_lenet(7 + rank), small_buckets(group));
        ASSERT_GE(ddp->reducer().bucket_parameters().size(), 3u);
        optim::SGD opt(ddp->parameters(), sgd());
        for (int s = 0; s < steps; ++s) {
          auto [x, y] = batch_for(s, batch);
          opt.zero_grad();
          F::cross_entropy(ddp->forward(shard(x, rank, world)), shard(y, rank, world)).backward();
          opt.step();
        }
        auto reference = make_lenet(7);
        train_single(*reference, steps, batch);
        const double difference = max_difference(ddp->module(), *reference);
        std::printf("rank %d of %d: max |DDP - single process| after %d steps: %.3g\n", rank, world, steps,
                    difference);
        EXPECT_LE(difference, 1e-5);
      },
      slow_ranks());
}

TEST(DistributedDataParallel, TwoRanksTrainAsOneProcessWithTheWholeBatchFor100Steps) {
  expect_ddp_matches_single_process(2, 100, 8);
}

TEST(DistributedDataParallel, FourRanksTrainAsOneProcessWithTheWholeBatchFor100Steps) {
  expect_ddp_matches_single_process(4, 100, 8);
}

TEST(DistributedDataParallel, NoSyncAccumulatesMicroBatchesAsOneBigBatch) {
  // 2 ranks x 2 micro-batches of 2 = one step on a batch of 8, with the
  // loss of each micro-batch divided by the number of micro-batches.
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto ddp = std::make_shared<DistributedDataParallel>(make_lenet(3), small_buckets(group));
    optim::SGD opt(ddp->parameters(), sgd());
    constexpr int kSteps = 20, kMicro = 2;
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = batch_for(s, 8);
      Tensor xr = shard(x, rank, 2), yr = shard(y, rank, 2);
      opt.zero_grad();
      for (int m = 0; m < kMicro; ++m) {
        auto step = [&] { (F::cross_entropy(ddp->forward(shard(xr, m, kMicro)), shard(yr, m, kMicro)) / kMicro).backward(); };
        if (m + 1 < kMicro) {
          auto guard = ddp->no_sync();
          step();
        } else {
          step();
        }
      }
      opt.step();
    }
    auto reference = make_lenet(3);
    train_single(*reference, kSteps, 8);
    EXPECT_LE(max_difference(ddp->module(), *reference), 1e-5);
  });
}

TEST(DistributedDataParallel, TheFirstBucketIsReducedWhileBackwardStillRuns) {
  // Note [DDP buckets]: bucket 0 (the last layers) is launched as soon as
  // its gradients are ready, before the first layers' gradients exist.
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto ddp = std::make_shared<DistributedDataParallel>(make_lenet(1), small_buckets(group));
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = batch_for(s, 8);
      F::cross_entropy(ddp->forward(shard(x, rank, 2)), shard(y, rank, 2)).backward();
      const BackwardTimeline& t = ddp->reducer().last_timeline();
      ASSERT_GE(t.bucket_launched.size(), 3u);
      EXPECT_LT(t.bucket_launched[0], t.last_gradient_ready) << "bucket 0 waited for the whole backward";
      EXPECT_LE(t.last_gradient_ready, t.finalize_started);
      EXPECT_LE(t.finalize_started, t.finalize_finished);
      for (size_t b = 1; b < t.bucket_launched.size(); ++b) EXPECT_LE(t.bucket_launched[b - 1], t.bucket_launched[b]);
    }
    // Buckets hold the parameters in reverse registration order: fc3 first.
    const auto buckets = ddp->reducer().bucket_parameters();
    const auto names = ddp->module().named_parameters().keys();
    EXPECT_EQ(names[buckets[0][0]], "fc3.bias");
    EXPECT_EQ(names[buckets.back().back()], "conv1.weight");
  });
}

TEST(DistributedDataParallel, UnusedParametersAreAllowedWithTheFlagAndNamedWithout) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    manual_seed(5);
    auto model = std::make_shared<Branchy>();
    manual_seed(5);
    auto reference = std::make_shared<Branchy>();
    DDPOptions options;
    options.group = group;
    options.find_unused_parameters = true;
    auto ddp = std::make_shared<DistributedDataParallel>(model, options);
    optim::SGD opt(ddp->parameters(), sgd());
    optim::SGD ref_opt(reference->parameters(), sgd());
    for (int s = 0; s < 6; ++s) {
      model->use_second = reference->use_second = s % 2 == 0;
      Generator gen;
      gen.manual_seed(s);
      Tensor x = randn({4, 4}, DType::Float64, &gen);
      opt.zero_grad();
      mean(pow(ddp->forward(shard(x, rank, 2)), 2)).backward();
      opt.step();
      ref_opt.zero_grad();
      mean(pow(reference->forward(x), 2)).backward();
      ref_opt.step();
    }
    EXPECT_LE(max_difference(*model, *reference), 1e-12);

    // Without the flag, the rank says which parameters got no gradient.
    auto strict = std::make_shared<DistributedDataParallel>(std::make_shared<Branchy>(), on(group));
    auto& inner = static_cast<Branchy&>(strict->module());
    inner.use_second = false;
    const std::string error = error_of([&] { sum(strict->forward(ones({2, 4}, DType::Float64))).backward(); });
    EXPECT_NE(error.find("these parameters got no gradient in this backward: fc2.weight, fc2.bias"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("find_unused_parameters = true"), std::string::npos) << error;
  });
}

TEST(DistributedDataParallel, RanksWithDifferentModelsAreToldWhichParameterDiffers) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3),
                                                  std::make_shared<nn::Linear>(3, rank == 0 ? 2 : 5));
    const std::string error = error_of([&] { DistributedDataParallel(model, on(group)); });
    EXPECT_NE(error.find("DistributedDataParallel: parameter 2 ('1.weight') is float32 [" +
                         std::string(rank == 0 ? "2, 3] on rank 0 but float32 [5, 3] on rank 1"
                                               : "5, 3] on rank 1 but float32 [2, 3] on rank 0")),
              std::string::npos)
        << error;
  });
}

TEST(DistributedDataParallel, BuffersComeFromRankZeroAtEachTrainingForward) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto bn = std::make_shared<nn::BatchNorm1d>(3);
    auto ddp = std::make_shared<DistributedDataParallel>(bn, on(group));
    // Each rank sees other data, so the running means differ after a step...
    sum(ddp->forward(full({4, 3}, double(10 * (rank + 1))))).backward();
    const float after_first = bn->running_mean.at<float>({0});
    EXPECT_FLOAT_EQ(after_first, rank == 0 ? 1.0f : 2.0f);  // momentum 0.1 from 0
    // ...and the next training forward starts from rank 0's.
    sum(ddp->forward(full({4, 3}, 0.0))).backward();
    EXPECT_FLOAT_EQ(bn->running_mean.at<float>({0}), 0.9f);
  });
}

TEST(DistributedDataParallel, TheWrappedModuleRunsThroughItsHooks) {
  run_on_ranks(2, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    auto linear = std::make_shared<nn::Linear>(3, 2);
    int pre = 0, backward = 0;
    linear->register_forward_pre_hook([&](nn::Module&, const Tensor&) { ++pre; });
    // Doubles the output, so the gradients double if and only if it ran.
    linear->register_forward_hook([](nn::Module&, const Tensor&, const Tensor& out) { return mul(out, 2.0); });
    linear->register_full_backward_hook([&](nn::Module&, const nn::TensorList&, const nn::TensorList&) { ++backward; });
    auto ddp = std::make_shared<DistributedDataParallel>(linear, on(group));
    sum((*ddp)(ones({4, 3}))).backward();
    EXPECT_EQ(pre, 1);
    EXPECT_EQ(backward, 1);
    // d sum(2 (x W^T + b)) / dW = 2 * (the column sums of x) = 8 on every
    // rank, and so is their average.
    EXPECT_EQ(max(abs(sub(linear->weight.grad(), full({2, 3}, 8.0)))).item<double>(), 0.0);
  });
}

TEST(DistributedDataParallel, TwoRunsGiveBitwiseTheSameWeights) {
  // The buckets, their order and gloo's ring are fixed, so the result does
  // not depend on when each bucket's gradients happened to be ready.
  run_on_ranks(2, [](int rank) {
    auto run = [&](int attempt) {
      auto group = make_test_group("gloo", kTimeout);
      auto ddp = std::make_shared<DistributedDataParallel>(make_lenet(11), small_buckets(group));
      optim::SGD opt(ddp->parameters(), sgd());
      for (int s = 0; s < 10; ++s) {
        auto [x, y] = batch_for(s, 8);
        opt.zero_grad();
        F::cross_entropy(ddp->forward(shard(x, rank, 2).to(DType::Float64)), shard(y, rank, 2)).backward();
        opt.step();
      }
      (void)attempt;
      return ddp->module().parameters();
    };
    const auto first = run(0), second = run(1);
    for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(equal(first[i], second[i])) << "parameter " << i;
  });
}

// The communication hooks inside DDP (their own error bounds are tested in
// comm_hook_test.cpp): 20 steps with float16 or bfloat16 buckets stay near
// exact training without being equal to it, and PowerSGD trains.
// `tolerance` bounds the weights' difference, `loss_tolerance` the relative
// difference of the last step's loss.
void expect_hook_trains_near_exact(std::shared_ptr<CommHook> hook, double tolerance, double loss_tolerance) {
  run_on_ranks(2, [=](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto train = [&](std::shared_ptr<CommHook> h) {
      DDPOptions options = small_buckets(group);
      options.comm_hook = h;
      auto ddp = std::make_shared<DistributedDataParallel>(make_lenet(21), options);
      optim::SGD opt(ddp->parameters(), sgd());
      Tensor last_loss;
      for (int s = 0; s < 20; ++s) {
        auto [x, y] = batch_for(s % 2, 8);
        opt.zero_grad();
        last_loss = F::cross_entropy(ddp->forward(shard(x, rank, 2)), shard(y, rank, 2));
        last_loss.backward();
        opt.step();
      }
      return std::make_pair(ddp, last_loss.item<double>());
    };
    auto [exact, exact_loss] = train(nullptr);
    auto [hooked, hooked_loss] = train(hook);
    const double difference = max_difference(exact->module(), hooked->module());
    std::printf("%s: max |hooked - exact| after 20 steps %.3g; loss %.4f vs %.4f\n", hook->name().c_str(),
                difference, hooked_loss, exact_loss);
    EXPECT_GT(difference, 0.0) << "the hook changed nothing: was it used?";
    EXPECT_LE(difference, tolerance);
    EXPECT_LE(std::abs(hooked_loss - exact_loss), loss_tolerance * exact_loss);
  });
}

TEST(DistributedDataParallel, Fp16CompressionTrainsNearExactTraining) {
  expect_hook_trains_near_exact(fp16_compress_hook(), 1e-2, 0.01);
}

TEST(DistributedDataParallel, Bf16CompressionTrainsNearExactTraining) {
  expect_hook_trains_near_exact(bf16_compress_hook(), 5e-2, 0.05);
}

TEST(DistributedDataParallel, PowerSgdTrainsNearExactTraining) {
  PowerSGDOptions options;
  options.matrix_approximation_rank = 2;
  options.start_iteration = 2;
  // Rank 2 of LeNet's (120, 400) fc1 weight drops most of each step's
  // gradient; error feedback sends it later, so the run lags a little.
  expect_hook_trains_near_exact(powersgd_hook(options), 0.5, 0.25);
}

TEST(TrainingHelpers, SumsAgreementsAndSeeds) {
  run_on_ranks(3, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    std::vector<double> metrics = {0.5 * rank, 1.0};
    all_reduce_sum(metrics, *group);
    EXPECT_EQ(metrics, (std::vector<double>{1.5, 3.0}));
    std::vector<int64_t> counts = {int64_t{1} << (40 + rank)};
    all_reduce_sum(counts, *group);
    EXPECT_EQ(counts[0], (int64_t{1} << 40) + (int64_t{1} << 41) + (int64_t{1} << 42));  // exact beyond float's 2^24
    EXPECT_EQ(is_main_process(*group), rank == 0);
    EXPECT_TRUE(any_rank_wants(rank == 2, *group));
    EXPECT_FALSE(any_rank_wants(false, *group));
    EXPECT_NE(per_rank_seed(7, rank), per_rank_seed(7, (rank + 1) % 3));
    EXPECT_NE(per_rank_seed(7, rank), per_rank_seed(8, rank));
    EXPECT_EQ(per_rank_seed(7, rank), per_rank_seed(7, rank));
  });
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
