// SyncBatchNorm against nn::BatchNorm on the whole batch in one process:
// every rank builds the same global batch, runs its shard through
// SyncBatchNorm, and also runs the whole batch through a float64 BatchNorm
// itself. Each rank's loss is sum(out * r) over its rows, so the ranks' losses
// sum to the single-process loss: outputs and input gradients must be the
// reference's rows, running statistics the reference's, and the parameter
// gradients must sum over ranks to the reference's (Note [SyncBatchNorm
// gradients and DDP]).
#include "distributed/ddp/sync_batch_norm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "distributed/init.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/flatten.h"
#include "nn/normalization.h"
#include "store_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

#ifdef KILN_WITH_GLOO
#include "distributed/ddp/distributed_data_parallel.h"
#include "multi_process.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "optim/sgd.h"
#endif

namespace kiln::distributed::testing {
namespace {

constexpr double kEps = 1e-5;

void expect_error_containing(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string message = error_of(f);
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

// Step `step`'s whole batch x (mean 3, spread 2: a mean large against the
// spread exercises the combination of the shards' variances) and the loss
// weights r, both of `shape`; the same on every rank.
std::pair<Tensor, Tensor> batch_for(int step, const Shape& shape) {
  Generator gen;
  gen.manual_seed(100 + static_cast<uint64_t>(step));
  Tensor x = ops::add(ops::mul(randn(shape, DType::Float64, &gen), 2.0), 3.0);
  return {x, randn(shape, DType::Float64, &gen)};
}

// Non-default weight, bias and running statistics, from `seed`.
void randomise(nn::BatchNorm& bn, uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen;
  gen.manual_seed(seed);
  const Shape c{bn.num_features};
  if (bn.affine) {
    bn.weight.copy_(ops::add(ops::mul(randn(c, DType::Float64, &gen), 0.5), 1.0));
    bn.bias.copy_(randn(c, DType::Float64, &gen));
  }
  if (bn.track_running_stats) {
    bn.running_mean.copy_(randn(c, DType::Float64, &gen));
    bn.running_var.copy_(ops::add(rand(c, DType::Float64, &gen), 0.5));
  }
}

struct Case {
  Shape shape;  // the whole batch, (N, C, *)
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
  DType dtype = DType::Float64;  // SyncBatchNorm's; the reference is float64
  double tolerance = 1e-12;
};

// The float64 reference: BatchNorm2d for (N, C, H, W), BatchNorm1d for the
// rest, which sees (N, C, *) as (N, C, S) exactly as batch norm does.
std::shared_ptr<nn::BatchNorm> reference_for(const Case& c) {
  const int64_t channels = c.shape[1];
  std::shared_ptr<nn::BatchNorm> bn;
  if (c.shape.size() == 4) {
    bn = std::make_shared<nn::BatchNorm2d>(channels, kEps, c.momentum, c.affine, c.track_running_stats);
  } else {
    bn = std::make_shared<nn::BatchNorm1d>(channels, kEps, c.momentum, c.affine, c.track_running_stats);
  }
  bn->to(DType::Float64);
  randomise(*bn, 7);
  return bn;
}

// The same batch through the reference and through a SyncBatchNorm, each on
// a clone of x, then backward of sum(out * r) through each.
struct BothRuns {
  Tensor out_ref, out_sync, x_ref, x_sync;  // x_* hold the input gradients
};
BothRuns run_both(nn::BatchNorm& reference, nn::BatchNorm& sync, const Tensor& x, const Tensor& r) {
  BothRuns runs{Tensor(), Tensor(), x.clone().requires_grad_(), x.clone().requires_grad_()};
  runs.out_ref = reference(runs.x_ref);
  runs.out_sync = sync(runs.x_sync);
  kiln::sum(kiln::mul(runs.out_ref, r)).backward();
  kiln::sum(kiln::mul(runs.out_sync, r)).backward();
  return runs;
}

#ifdef KILN_WITH_GLOO

using std::chrono::milliseconds;
constexpr milliseconds kTimeout(20000);

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  if (a.numel() == 0) return 0;  // an empty shard
  return ops::max(ops::abs(ops::sub(a.to(DType::Float64), b.to(DType::Float64)))).item<double>();
}

// Rows [rank * n / world, (rank + 1) * n / world) of `t`: 5 rows over 2
// ranks are 2 + 3, over 3 ranks 1 + 2 + 2; 2 rows over 3 ranks leave rank 0
// none.
Tensor shard(const Tensor& t, int rank, int world) {
  const int64_t n = t.size(0);
  const int64_t begin = rank * n / world, end = (rank + 1) * n / world;
  return t.narrow(0, begin, end - begin);
}

// A 5-dim batch goes to the BatchNorm1d reference as (N, C, D*H*W).
Tensor run_reference(nn::BatchNorm& bn, const Tensor& x) {
  if (x.dim() <= 4) return bn(x);
  return bn(x.reshape({x.size(0), x.size(1), -1})).view(x.shape());
}

// Two training steps of SyncBatchNorm on this rank's shard against the
// reference on the whole batch (see the file comment).
void expect_matches_batch_norm(ProcessGroup& group, const Case& c) {
  const int rank = group.rank(), world = group.size();
  auto reference = reference_for(c);
  auto sync = std::make_shared<SyncBatchNorm>(c.shape[1], kEps, c.momentum, c.affine, c.track_running_stats,
                                              group.shared_from_this());
  sync->to(c.dtype);
  sync->load_state_dict(reference->state_dict());
  double worst = 0;
  for (int step = 0; step < 2; ++step) {
    auto [x, r] = batch_for(step, c.shape);
    Tensor x_all = x.clone().requires_grad_();
    Tensor out_all = run_reference(*reference, x_all);
    kiln::sum(kiln::mul(out_all, r)).backward();

    Tensor x_mine = shard(x, rank, world).to(c.dtype).clone().requires_grad_();
    Tensor out_mine = (*sync)(x_mine);
    kiln::sum(kiln::mul(out_mine, shard(r, rank, world).to(c.dtype))).backward();

    worst = std::max(worst, max_abs_diff(out_mine, shard(out_all, rank, world)));
    worst = std::max(worst, max_abs_diff(x_mine.grad(), shard(x_all.grad(), rank, world)));
    if (c.affine) {
      for (const char* name : {"weight", "bias"}) {
        Tensor total = sync->get_parameter(name).grad().to(DType::Float64).clone();
        group.all_reduce(total)->wait();
        worst = std::max(worst, max_abs_diff(total, reference->get_parameter(name).grad()));
      }
    }
    if (c.track_running_stats) {
      worst = std::max(worst, max_abs_diff(sync->running_mean, reference->running_mean));
      worst = std::max(worst, max_abs_diff(sync->running_var, reference->running_var));
      EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), reference->num_batches_tracked.item<int64_t>());
    }
    reference->zero_grad();
    sync->zero_grad();
  }
  std::printf("rank %d of %d, batch %s: max |SyncBatchNorm - BatchNorm| = %.3g\n", rank, world,
              detail::str(c.shape).c_str(), worst);
  EXPECT_LE(worst, c.tolerance);
}

TEST(SyncBatchNorm, TwoRanksWithUnevenShardsMatchBatchNorm2dOnTheWholeBatch) {
  run_on_ranks(2, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    expect_matches_batch_norm(*group, {.shape = {5, 3, 4, 3}});  // 2 + 3 samples
  });
}

TEST(SyncBatchNorm, ThreeRanksMatchBatchNormIncludingOneSampleAndEmptyShards) {
  run_on_ranks(3, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    expect_matches_batch_norm(*group, {.shape = {7, 3, 2, 5}});
    // Rank 0 holds one (N, C) row, one value per channel; cumulative average.
    expect_matches_batch_norm(*group, {.shape = {5, 4}, .momentum = std::nullopt});
    // Rank 0 holds no rows at all.
    expect_matches_batch_norm(*group, {.shape = {2, 3, 4}});
    // (N, C, D, H, W): any rank >= 2.
    expect_matches_batch_norm(*group, {.shape = {4, 2, 2, 3, 2}});
  });
}

TEST(SyncBatchNorm, WithoutAffineOrRunningStatisticsMatchesBatchNorm) {
  run_on_ranks(2, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    expect_matches_batch_norm(*group, {.shape = {6, 3, 2, 2}, .affine = false, .track_running_stats = false});
  });
}

TEST(SyncBatchNorm, Float32MatchesTheFloat64Reference) {
  run_on_ranks(2, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    expect_matches_batch_norm(*group, {.shape = {6, 3, 4, 4}, .dtype = DType::Float32, .tolerance = 2e-5});
  });
}

// Linear(4, 3) then `norm` over its 3 features, in float64, the same weights
// on every rank.
std::shared_ptr<nn::Module> linear_then(std::shared_ptr<nn::BatchNorm> norm) {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), norm);
  model->to(DType::Float64);
  randomise(*norm, 9);
  return model;
}

TEST(SyncBatchNorm, AveragingLocalGradientsOverRanksGivesTheSingleProcessGradient) {
  // What DDP does: each rank's loss is the mean over its B / W rows, and each
  // parameter's gradient is averaged over ranks. That must be the gradient of
  // the mean loss over the whole batch, for the Linear before the norm and
  // for the norm's own weight and bias alike.
  for (int world : {2, 3}) {
    run_on_ranks(world, [world](int rank) {
      auto group = make_test_group("gloo", kTimeout);
      const int64_t batch = 6;
      auto reference = linear_then(std::make_shared<nn::BatchNorm1d>(3));
      auto model = convert_sync_batchnorm(linear_then(std::make_shared<nn::BatchNorm1d>(3)), group);
      auto [x, r] = batch_for(0, {batch, 4});
      r = r.narrow(1, 0, 3).contiguous();  // (B, 3): weights of the per-sample loss sum(out * r)
      kiln::div(kiln::sum(kiln::mul((*reference)(x), r)), static_cast<double>(batch)).backward();
      Tensor out = (*model)(shard(x, rank, world));
      kiln::div(kiln::sum(kiln::mul(out, shard(r, rank, world))), static_cast<double>(batch / world)).backward();

      const TensorDict expected = reference->named_parameters();
      const TensorDict got = model->named_parameters();
      ASSERT_EQ(got.keys(), expected.keys());
      for (const std::string& name : expected.keys()) {
        Tensor average = got.at(name).grad().clone();
        group->all_reduce(average, ReduceOp::Avg)->wait();
        const double difference = max_abs_diff(average, expected.at(name).grad());
        std::printf("rank %d of %d: max |average of %s.grad - single process| = %.3g\n", rank, world, name.c_str(),
                    difference);
        EXPECT_LE(difference, 1e-12) << name << " over " << world << " ranks";
      }
    });
  }
}

TEST(SyncBatchNorm, UnderDistributedDataParallelTrainsAsOneProcess) {
  // convert_sync_batchnorm + DDP + SGD on shards of 6 samples, against the
  // unconverted model trained on the whole batch: parameters and running
  // statistics after 3 steps.
  auto make_model = [] {
    manual_seed(11);
    auto model = std::make_shared<nn::Sequential>(
        std::make_shared<nn::Conv2d>(3, 4, 3), std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 4 * 4, 5));
    model->to(DType::Float64);
    return std::static_pointer_cast<nn::Module>(model);
  };
  auto batch = [](int step) {
    Generator gen;
    gen.manual_seed(200 + static_cast<uint64_t>(step));
    return std::pair{randn({6, 3, 6, 6}, DType::Float64, &gen), randint(0, 5, {6}, DType::Int64, &gen)};
  };
  optim::SGDOptions sgd = optim::SGDOptions(0.1).momentum(0.9);
  for (int world : {2, 3}) {
    run_on_ranks(world, [&, world](int rank) {
      auto group = make_test_group("gloo", kTimeout);
      DDPOptions options;
      options.group = group;
      auto ddp = std::make_shared<DistributedDataParallel>(convert_sync_batchnorm(make_model(), group), options);
      auto reference = make_model();
      optim::SGD opt(ddp->parameters(), sgd), reference_opt(reference->parameters(), sgd);
      for (int step = 0; step < 3; ++step) {
        auto [x, y] = batch(step);
        opt.zero_grad();
        nn::functional::cross_entropy(ddp->forward(shard(x, rank, world)), shard(y, rank, world)).backward();
        opt.step();
        reference_opt.zero_grad();
        nn::functional::cross_entropy((*reference)(x), y).backward();
        reference_opt.step();
      }
      const TensorDict expected = reference->state_dict(), got = ddp->module().state_dict();
      ASSERT_EQ(got.keys(), expected.keys());
      EXPECT_GT(max_abs_diff(expected.at("1.weight"), ones({4}, DType::Float64)), 1e-3) << "the norm did not train";
      for (const std::string& name : expected.keys()) {
        const double difference = max_abs_diff(got.at(name), expected.at(name));
        std::printf("rank %d of %d: max |%s with DDP - single process| = %.3g\n", rank, world, name.c_str(),
                    difference);
        EXPECT_LE(difference, 1e-10) << name << " over " << world << " ranks";
      }
    });
  }
}

TEST(SyncBatchNorm, EvalUsesRunningStatisticsWithoutCommunication) {
  // Only rank 0 runs the layer, on data of its own: a collective would wait
  // for rank 1 until the timeout.
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(5));
    if (rank != 0) return;
    for (bool track : {true, false}) {  // without running stats: the local batch's, as torch
      Case c{.shape = {3, 2, 4}, .track_running_stats = track};
      auto reference = reference_for(c);
      auto sync = std::make_shared<SyncBatchNorm>(2, kEps, 0.1, true, track, group);
      sync->to(DType::Float64);
      sync->load_state_dict(reference->state_dict());
      reference->eval();
      sync->eval();
      auto [x, r] = batch_for(3, c.shape);
      const BothRuns runs = run_both(*reference, *sync, x, r);
      EXPECT_TRUE(kiln::equal(runs.out_sync, runs.out_ref));
      EXPECT_TRUE(kiln::equal(runs.x_sync.grad(), runs.x_ref.grad()));
    }
    EXPECT_EQ(group->sequence_number(), 0u);
  });
}

TEST(SyncBatchNorm, AGroupOfOneProcessIsExactlyBatchNorm) {
  run_on_ranks(1, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    Case c{.shape = {4, 3, 2, 2}};
    auto reference = reference_for(c);
    auto sync = std::make_shared<SyncBatchNorm>(3, kEps, 0.1, true, true, group);
    sync->to(DType::Float64);
    sync->load_state_dict(reference->state_dict());
    auto [x, r] = batch_for(0, c.shape);
    const BothRuns runs = run_both(*reference, *sync, x, r);
    EXPECT_TRUE(kiln::equal(runs.x_sync.grad(), runs.x_ref.grad()));
    EXPECT_TRUE(kiln::equal(sync->weight.grad(), reference->weight.grad()));
    EXPECT_TRUE(kiln::equal(sync->running_var, reference->running_var));
    EXPECT_EQ(group->sequence_number(), 0u);
  });
}

TEST(SyncBatchNorm, TooFewValuesOverTheGroupThrowOnEveryRank) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto sync = std::make_shared<SyncBatchNorm>(3, kEps, 0.1, true, true, group);
    Tensor x = shard(ones({1, 3}), rank, 2);  // rank 0: no rows, rank 1: one
    expect_error_containing([&] { (*sync)(x); }, {"SyncBatchNorm", "more than 1 value per channel", "got 1"});
  });
}

#endif  // KILN_WITH_GLOO

TEST(SyncBatchNorm, WithoutAnyProcessGroupIsExactlyBatchNorm) {
  ASSERT_FALSE(is_initialized());
  Case c{.shape = {4, 3, 5}, .momentum = std::nullopt};
  auto reference = reference_for(c);
  auto sync = std::make_shared<SyncBatchNorm>(3, kEps, std::nullopt);
  sync->to(DType::Float64);
  sync->load_state_dict(reference->state_dict());
  auto [x, r] = batch_for(0, c.shape);
  const BothRuns runs = run_both(*reference, *sync, x, r);
  EXPECT_TRUE(kiln::equal(runs.out_sync, runs.out_ref));
  EXPECT_TRUE(kiln::equal(runs.x_sync.grad(), runs.x_ref.grad()));
  EXPECT_TRUE(kiln::equal(sync->bias.grad(), reference->bias.grad()));
  EXPECT_TRUE(kiln::equal(sync->running_mean, reference->running_mean));
}

TEST(SyncBatchNorm, RejectsInputsOfTheWrongRankOrChannelCount) {
  auto sync = std::make_shared<SyncBatchNorm>(3);
  expect_error_containing([&] { (*sync)(ones({3})); }, {"SyncBatchNorm", "at least 2 dims", "1D input"});
  expect_error_containing([&] { (*sync)(ones({2, 4, 5})); }, {"SyncBatchNorm", "expected 3 channels", "[2, 4, 5]"});
  expect_error_containing([] { SyncBatchNorm(0); }, {"SyncBatchNorm", "num_features must be positive"});
}

// ---- convert_sync_batchnorm ----

// Reaches its layers through the registry, as a module that
// convert_sync_batchnorm converts must: BatchNorms inside a Sequential (one
// in a nested Sequential), a ModuleList and a ModuleDict, and one of its own.
struct Net : nn::Module {
  Net() {
    manual_seed(3);
    register_module(
        "features",
        std::make_shared<nn::Sequential>(
            std::make_shared<nn::Conv2d>(3, 4, 3), std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::Sequential>(std::make_shared<nn::BatchNorm2d>(4, 1e-3, std::nullopt))));
    register_module("blocks", std::make_shared<nn::ModuleList>(std::make_shared<nn::BatchNorm2d>(4)));
    register_module("heads", std::make_shared<nn::ModuleDict>(std::vector<nn::NamedModule>{
                                 {"norm", std::make_shared<nn::BatchNorm1d>(4, kEps, 0.1, false)}}));
    register_module("pool_norm", std::make_shared<nn::BatchNorm1d>(4));
    to(DType::Float64);
    uint64_t seed = 20;
    for (const auto& [path, module] : named_modules("", /*include_self=*/false)) {
      if (auto bn = std::dynamic_pointer_cast<nn::BatchNorm>(module)) {
        randomise(*bn, seed++);
        ops::fill_(bn->num_batches_tracked, 5);
      }
    }
    get_submodule("features.3")->eval();
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*get_submodule("features"))(x);  // (N, 4, H, W)
    h = (*std::dynamic_pointer_cast<nn::ModuleList>(get_submodule("blocks"))->operator[](0))(h);
    h = kiln::mean(h, {2, 3});  // (N, 4)
    h = (*std::dynamic_pointer_cast<nn::ModuleDict>(get_submodule("heads"))->operator[]("norm"))(h);
    return (*get_submodule("pool_norm"))(h);
  }
};

const std::vector<std::string> kNetBatchNorms = {"features.1", "features.3.0", "blocks.0", "heads.norm", "pool_norm"};

TEST(ConvertSyncBatchnorm, ReplacesNestedBatchNormsKeepingTheirTensorsAndSettings) {
  auto net = std::make_shared<Net>();
  std::vector<std::shared_ptr<nn::BatchNorm>> old;
  for (const std::string& path : kNetBatchNorms) {
    old.push_back(std::dynamic_pointer_cast<nn::BatchNorm>(net->get_submodule(path)));
  }
  const std::vector<std::string> keys = net->state_dict().keys();
  std::shared_ptr<nn::Module> features = net->get_submodule("features");

  std::shared_ptr<nn::Module> converted = convert_sync_batchnorm(net);
  EXPECT_EQ(converted, net);  // changed in place
  for (size_t i = 0; i < kNetBatchNorms.size(); ++i) {
    auto sync = std::dynamic_pointer_cast<SyncBatchNorm>(converted->get_submodule(kNetBatchNorms[i]));
    ASSERT_NE(sync, nullptr) << kNetBatchNorms[i];
    const nn::BatchNorm& bn = *old[i];
    // The same tensors: an optimizer built on the old ones keeps working.
    EXPECT_TRUE(sync->weight.is_same(bn.weight) && sync->bias.is_same(bn.bias));
    EXPECT_TRUE(sync->running_mean.is_same(bn.running_mean) && sync->running_var.is_same(bn.running_var));
    EXPECT_TRUE(sync->num_batches_tracked.is_same(bn.num_batches_tracked));
    EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 5);
    EXPECT_EQ(sync->weight.defined() && sync->weight.requires_grad(), bn.affine);
    EXPECT_EQ(sync->eps, bn.eps);
    EXPECT_EQ(sync->momentum, bn.momentum);
    EXPECT_EQ(sync->affine, bn.affine);
    EXPECT_EQ(sync->is_training(), bn.is_training()) << kNetBatchNorms[i];
    EXPECT_EQ(sync->group(), nullptr);
  }
  for (const auto& [path, module] : converted->named_modules()) {
    // SyncBatchNorm derives from BatchNorm: a plain one is what must be gone.
    const bool plain_batch_norm = std::dynamic_pointer_cast<nn::BatchNorm>(module) != nullptr &&
                                  std::dynamic_pointer_cast<SyncBatchNorm>(module) == nullptr;
    EXPECT_FALSE(plain_batch_norm) << path << " is still a BatchNorm";
  }
  EXPECT_FALSE(converted->get_submodule("features.3.0")->is_training());
  EXPECT_EQ(converted->state_dict().keys(), keys);
  // The Sequential was rebuilt, so that its own list runs the new layer.
  auto sequential = std::dynamic_pointer_cast<nn::Sequential>(converted->get_submodule("features"));
  EXPECT_NE(sequential, features);
  EXPECT_EQ((*sequential)[1], converted->get_submodule("features.1"));
  EXPECT_EQ(converted->get_submodule("features.0"), features->get_submodule("0"));  // other layers are kept
  std::ostringstream repr;
  repr << *converted->get_submodule("heads.norm");
  EXPECT_EQ(repr.str(), "SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=False, track_running_stats=True)");

  // Without a process group the converted model computes what the original did.
  auto original = std::make_shared<Net>();
  Tensor x = randn({5, 3, 6, 6}, DType::Float64);
  EXPECT_TRUE(kiln::equal((*converted)(x), (*original)(x)));
  EXPECT_TRUE(
      kiln::equal(converted->get_buffer("pool_norm.running_var"), original->get_buffer("pool_norm.running_var")));
}

TEST(ConvertSyncBatchnorm, ConvertsABatchNormRootAndASharedLayerOnceAndLeavesOtherModulesAlone) {
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  auto root = std::dynamic_pointer_cast<SyncBatchNorm>(convert_sync_batchnorm(bn));
  ASSERT_NE(root, nullptr);
  EXPECT_TRUE(root->weight.is_same(bn->weight));

  auto shared = std::make_shared<nn::BatchNorm1d>(3);
  auto model =
      std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), shared, std::make_shared<nn::Sequential>(shared));
  auto converted = convert_sync_batchnorm(model);
  EXPECT_NE(std::dynamic_pointer_cast<SyncBatchNorm>(converted->get_submodule("1")), nullptr);
  EXPECT_EQ(converted->get_submodule("1"), converted->get_submodule("2.0"));
  EXPECT_EQ(converted->get_submodule("0"), model->get_submodule("0"));

  auto plain = std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>());
  EXPECT_EQ(convert_sync_batchnorm(plain), plain);
}

TEST(ConvertSyncBatchnorm, ABatchNormStillCalledThroughAMemberHandleThrows) {
  // convert_sync_batchnorm cannot reassign `bn`; the old layer must not
  // silently train with per-rank statistics.
  struct MemberNet : nn::Module {
    MemberNet() { bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(3)); }
    Tensor forward(const Tensor& x) override { return (*bn)(x); }
    std::shared_ptr<nn::BatchNorm1d> bn;
  };
  auto converted = convert_sync_batchnorm(std::make_shared<MemberNet>());
  expect_error_containing(
      [&] {
        (*converted)(ones({4, 3}));
      },
      {"BatchNorm1d 'bn' was replaced by a SyncBatchNorm in convert_sync_batchnorm", "get_submodule"});
}

}  // namespace
}  // namespace kiln::distributed::testing
