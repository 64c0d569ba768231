// FullyShardedDataParallel against single-process training: N ranks with a
// per-rank batch of B / N, each holding 1/N of the model, must take the
// steps one process takes with batch B, under every sharding strategy. As in
// ddp_test.cpp the models train in float64, so that the comparison measures
// the maths; rank 0 also trains the single-process reference and compares
// the gathered parameters with it.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "distributed/zero/zero_redundancy_optimizer.h"
#include "fsdp_test_util.h"
#include "multi_process.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/models/gpt.h"
#include "nn/models/lenet.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "tensor/allocator.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/parallel.h"
#include "tensor/random.h"
#include "training_test_util.h"

namespace kiln::distributed::testing {
namespace {

namespace F = nn::functional;
using fsdp::FSDPOptions;
using fsdp::FullyShardedDataParallel;
using fsdp::ShardingStrategy;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout(30000);

RankOptions slow_ranks() {
  RankOptions options;
  options.deadline = std::chrono::seconds(180);
  return options;
}

// ---- the models ----------------------------------------------------------

// A wide MLP whose hidden layers are units of their own and whose last
// layer stays in the root unit.
class WideMlp : public nn::Module {
 public:
  explicit WideMlp(DType dtype = DType::Float64, bool checkpointed = false) : checkpointed_(checkpointed) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(12, 96));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(96, 96));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(96, 96));
    head = register_module("head", std::make_shared<nn::Linear>(96, 5));
    to(dtype);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*fc1)(x));
    if (checkpointed_) {
      h = autograd::checkpoint([&](const nn::TensorList& in) { return nn::TensorList{relu((*fc2)(in[0]))}; },
                               {h})[0];
    } else {
      h = relu((*fc2)(h));
    }
    h = relu((*fc3)(h));
    return (*head)(h);
  }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3, head;

 private:
  bool checkpointed_;
};

std::shared_ptr<WideMlp> make_mlp(uint64_t seed, DType dtype = DType::Float64, bool checkpointed = false) {
  manual_seed(seed);
  return std::make_shared<WideMlp>(dtype, checkpointed);
}

// The MLP's units: every Linear of more than 1,000 weights (fc1, fc2, fc3).
fsdp::WrapPolicy mlp_policy() { return fsdp::wrap_by_numel(1000); }

std::pair<Tensor, Tensor> mlp_batch(int step, int64_t batch, DType dtype = DType::Float64) {
  Generator gen;
  gen.manual_seed(500 + static_cast<uint64_t>(step));
  return {randn({batch, 12}, dtype, &gen), randint(0, 5, {batch}, DType::Int64, &gen)};
}

// One model family: how to make it, its batches and its loss.
struct Family {
  std::string name;
  std::function<std::shared_ptr<nn::Module>(uint64_t seed)> make;
  std::function<std::pair<Tensor, Tensor>(int step, int64_t batch)> batch;
  std::function<Tensor(const Tensor& out, const Tensor& y)> loss;
  fsdp::WrapPolicy policy;
  int64_t batch_size;
};

Tensor class_loss(const Tensor& out, const Tensor& y) { return F::cross_entropy(out, y); }
Tensor token_loss(const Tensor& logits, const Tensor& y) { return nn::GPT::loss_from_logits(logits, y); }

Family mlp_family() {
  return {"MLP", [](uint64_t s) -> std::shared_ptr<nn::Module> { return make_mlp(s); },
          [](int step, int64_t b) { return mlp_batch(step, b); }, class_loss, mlp_policy(), 12};
}

Family lenet_family() {
  return {"LeNet", [](uint64_t s) { return make_lenet(s); },
          [](int step, int64_t b) { return batch_for(step, b); }, class_loss, fsdp::wrap_by_numel(2000), 12};
}

Family gpt_family() {
  return {"GPT", [](uint64_t s) -> std::shared_ptr<nn::Module> { return make_gpt(s); },
          [](int step, int64_t b) { return gpt_batch(step, b, 900); }, token_loss,
          fsdp::wrap_by_class<nn::gpt::Block>(), 12};
}

FSDPOptions opts(std::shared_ptr<ProcessGroup> group, fsdp::WrapPolicy policy = {}) {
  FSDPOptions options;
  options.group = std::move(group);
  options.wrap_policy = std::move(policy);
  return options;
}

optim::AdamOptions adam() {
  optim::AdamOptions o(1e-3);
  return o;
}

// max |a - b| / max(1, max |b|) over the parameters, in float64.
double relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    Tensor x = a[i].to(DType::Float64), y = b[i].to(DType::Float64);
    double d = ops::max(ops::abs(ops::sub(x, y))).item<double>();
    double scale = std::max(1.0, ops::max(ops::abs(y)).item<double>());
    worst = std::max(worst, d / scale);
  }
  return worst;
}

std::vector<Tensor> train_single(const Family& family, int steps) {
  auto model = family.make(11);
  optim::Adam opt(model->parameters(), adam());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = family.batch(s, family.batch_size);
    opt.zero_grad();
    family.loss(model->forward(x), y).backward();
    opt.step();
  }
  return model->parameters();
}

void expect_fsdp_matches_single_process(const Family& family, int world, ShardingStrategy strategy, int steps,
                                        int hybrid_shard_size = 0) {
  run_on_ranks(
      world,
      [=](int rank) {
        set_num_threads(1);  // up to 4 ranks share 2 cores
        auto group = make_test_group("gloo", kTimeout);
        FSDPOptions options;
        options.group = group;
        options.strategy = strategy;
        options.wrap_policy = family.policy;
        options.hybrid_shard_size = hybrid_shard_size;
        // Each rank starts from other weights: FSDP must take rank 0's.
        auto model = family.make(11 + rank);
        optim::Adam opt(model->parameters(), adam());
        auto fsdp = std::make_shared<FullyShardedDataParallel>(model, options);
        ASSERT_GE(fsdp->units().size(), 3u);
        for (int s = 0; s < steps; ++s) {
          auto [x, y] = family.batch(s, family.batch_size);
          opt.zero_grad();
          family.loss(fsdp->forward(rows_of(x, rank, world)), rows_of(y, rank, world)).backward();
          opt.step();
        }
        std::vector<Tensor> mine = full_parameters(*fsdp);
        if (rank != 0) return;
        const double difference = relative_difference(mine, train_single(family, steps));
        std::printf("%s, %s on %d ranks: max relative |FSDP - single process| after %d Adam steps: %.3g\n",
                    family.name.c_str(), fsdp::sharding_strategy_name(strategy), world, steps, difference);
        EXPECT_LE(difference, 1e-10);
      },
      slow_ranks());
}

// ---- equal to single-process training ------------------------------------

TEST(FSDP, FullShardTrainsTheMlpAsOneProcessOn2And3And4Ranks) {
  for (int world : {2, 3, 4}) expect_fsdp_matches_single_process(mlp_family(), world, ShardingStrategy::FullShard, 100);
}

TEST(FSDP, ShardGradOpTrainsTheMlpAsOneProcessOn2And3And4Ranks) {
  for (int world : {2, 3, 4}) {
    expect_fsdp_matches_single_process(mlp_family(), world, ShardingStrategy::ShardGradOp, 100);
  }
}

TEST(FSDP, NoShardTrainsTheMlpAsOneProcessOn2And3And4Ranks) {
  for (int world : {2, 3, 4}) expect_fsdp_matches_single_process(mlp_family(), world, ShardingStrategy::NoShard, 100);
}

TEST(FSDP, HybridShardTrainsTheMlpAsOneProcessOn4RanksAsTwoGroupsOfTwo) {
  expect_fsdp_matches_single_process(mlp_family(), 4, ShardingStrategy::HybridShard, 100, /*hybrid_shard_size=*/2);
}

// Every strategy on 2, 3 and 4 ranks. HYBRID_SHARD shards within groups of
// 2 on 4 ranks; on 2 and 3 ranks its only proper groups are of 1 rank (a
// replicate-only hybrid, through the same code).
void expect_every_strategy_matches_single_process(const Family& family) {
  for (ShardingStrategy strategy : {ShardingStrategy::FullShard, ShardingStrategy::ShardGradOp,
                                    ShardingStrategy::NoShard, ShardingStrategy::HybridShard}) {
    for (int world : {2, 3, 4}) {
      const int hybrid = strategy == ShardingStrategy::HybridShard ? (world == 4 ? 2 : 1) : 0;
      expect_fsdp_matches_single_process(family, world, strategy, 100, hybrid);
    }
  }
}

TEST(FSDP, EveryStrategyTrainsLeNetAsOneProcess) { expect_every_strategy_matches_single_process(lenet_family()); }

TEST(FSDP, EveryStrategyTrainsTheGptAsOneProcess) { expect_every_strategy_matches_single_process(gpt_family()); }

// ---- what each rank holds -------------------------------------------------

TEST(FSDP, EachRankHoldsItsShardOfEveryParameterAndOptimizerState) {
  run_on_ranks(3, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = make_mlp(3);
    const int64_t total = [&] {
      int64_t n = 0;
      for (const Tensor& p : model->parameters()) n += p.numel();
      return n;
    }();
    FSDPOptions options;
    options.group = group;
    options.wrap_policy = mlp_policy();
    FullyShardedDataParallel fsdp(model, options);
    // Units: the root (head) first, then fc1, fc2, fc3 in module order.
    auto units = fsdp.units();
    ASSERT_EQ(units.size(), 4u);
    EXPECT_EQ(units[0].name, "");
    EXPECT_EQ(units[0].parameters, (std::vector<std::string>{"head.weight", "head.bias"}));
    EXPECT_EQ(units[1].name, "fc1");
    EXPECT_EQ(units[3].name, "fc3");
    int64_t held = 0, shard_total = 0;
    for (const auto& s : fsdp.parameter_shards()) {
      EXPECT_EQ(s.param.dim(), 1) << s.name;
      EXPECT_EQ(s.param.numel(), s.local_numel) << s.name;
      EXPECT_TRUE(s.writer);
      held += s.local_numel;
    }
    for (size_t u = 0; u < units.size(); ++u) {
      // Note [FSDP unit padding]: each unit's shard size is unique mod the unit count.
      EXPECT_EQ(units[u].shard_numel % 4, static_cast<int64_t>(u));
      EXPECT_GE(units[u].shard_numel * 3, units[u].numel);
      EXPECT_LT(units[u].shard_numel * 3, units[u].numel + 3 * 4);
      shard_total += units[u].shard_numel;
    }
    EXPECT_LE(held, shard_total);
    // Summed over the ranks, every element is held exactly once.
    Tensor count = full({1}, static_cast<double>(held), DType::Int64);
    group->all_reduce(count)->wait();
    EXPECT_EQ(count.item<int64_t>(), total);

    optim::Adam opt(model->parameters(), adam());
    auto [x, y] = mlp_batch(0, 6);
    F::cross_entropy(fsdp.forward(rows_of(x, rank, 3)), rows_of(y, rank, 3)).backward();
    for (const auto& s : fsdp.parameter_shards()) {
      ASSERT_TRUE(s.param.grad().defined()) << s.name;
      EXPECT_EQ(s.param.grad().numel(), s.local_numel) << s.name;
    }
    opt.step();
    for (const auto& s : fsdp.parameter_shards()) {
      EXPECT_EQ(opt.state(s.param).at("exp_avg").numel(), s.local_numel) << s.name;
    }
  });
}

TEST(FSDP, TheOptimizerMayBeMadeAfterWrappingAndParametersKeepTheirHandles) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = make_mlp(3);
    Tensor fc1_weight = model->fc1->weight;
    FullyShardedDataParallel fsdp(model, opts(group, mlp_policy()));
    EXPECT_EQ(fsdp.module().get_parameter("fc1.weight").impl(), fc1_weight.impl());
    bool seen_full = false;
    fsdp.with_full_parameters([&] { seen_full = fc1_weight.shape() == Shape{96, 12}; }, false);
    EXPECT_TRUE(seen_full);
    EXPECT_EQ(fc1_weight.dim(), 1);
    (void)rank;
  });
}

TEST(FSDP, TheWrappersStateDictIsTheFullModelAndLoadsBackIntoShards) {
  run_on_ranks(3, [](int rank) {
    set_num_threads(1);
    auto group = make_test_group("gloo", kTimeout);
    auto gpt = make_gpt(4);
    const TensorDict plain = gpt->state_dict();  // before wrapping: full tensors, tied head included
    std::vector<Tensor> expected;
    for (const auto& [name, t] : plain) expected.push_back(t.clone());
    auto fsdp = shard_by_block(gpt, group);
    const TensorDict full = fsdp->state_dict();  // collective
    ASSERT_EQ(full.size(), plain.size());
    size_t i = 0;
    for (const auto& [name, t] : plain) {
      ASSERT_TRUE(full.contains("module." + name)) << name;
      EXPECT_TRUE(equal(full.at("module." + name), expected[i++])) << name;
    }
    // Into another FSDP model (other weights): each rank keeps its part.
    auto other = make_gpt(5);
    auto fsdp2 = shard_by_block(other, group);
    fsdp2->load_state_dict(full);
    EXPECT_EQ(relative_difference(full_parameters(*fsdp2), full_parameters(*fsdp)), 0.0);
    // A wrong shape is still an error naming the key.
    TensorDict bad = full;
    bad.insert_or_assign("module.transformer.wpe.weight", zeros({3, 3}, DType::Float64));
    EXPECT_THROW(fsdp2->load_state_dict(bad), Error);
    (void)rank;
  });
}

// ---- no_sync, clipping, checkpointing, mixed precision --------------------

// Frozen parameters (requires_grad false) get no gradient and are not
// stepped, as without FSDP: a unit frozen whole (fc1) and one frozen in part
// (fc2's bias), which reshards only when backward ends.
TEST(FSDP, FrozenParametersStayAsTheyWereAndTheRestTrainsAsOneProcess) {
  auto freeze = [](WideMlp& m) {
    m.fc1->weight.requires_grad_(false);
    m.fc1->bias.requires_grad_(false);
    m.fc2->bias.requires_grad_(false);
  };
  run_on_ranks(3, [&](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = make_mlp(9);
    freeze(*model);
    const Tensor fc1_before = model->fc1->weight.detach().clone();
    optim::Adam opt(model->parameters(), adam());
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, opts(group, mlp_policy()));
    for (int s = 0; s < 10; ++s) {
      auto [x, y] = mlp_batch(s, 12);
      opt.zero_grad();
      F::cross_entropy(fsdp->forward(rows_of(x, rank, 3)), rows_of(y, rank, 3)).backward();
      EXPECT_FALSE(model->fc1->weight.grad().defined());
      EXPECT_FALSE(model->fc2->bias.grad().defined());
      EXPECT_TRUE(model->fc2->weight.grad().defined());
      opt.step();
    }
    std::vector<Tensor> mine = full_parameters(*fsdp);
    if (rank != 0) return;
    EXPECT_TRUE(equal(mine[0], fc1_before));  // fc1.weight, first in order
    auto reference = make_mlp(9);
    freeze(*reference);
    optim::Adam ref_opt(reference->parameters(), adam());
    for (int s = 0; s < 10; ++s) {
      auto [x, y] = mlp_batch(s, 12);
      ref_opt.zero_grad();
      F::cross_entropy(reference->forward(x), y).backward();
      ref_opt.step();
    }
    EXPECT_LE(relative_difference(mine, reference->parameters()), 1e-12);
  });
}

TEST(FSDP, NoSyncAccumulatesMicroBatchesAsOneBigBatch) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = make_mlp(5);
    optim::Adam opt(model->parameters(), adam());
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, opts(group, mlp_policy()));
    // Three micro-batches of 4 rows per rank, the first two inside no_sync:
    // gradients summed, so each loss is scaled by 1/3 to average them.
    for (int step = 0; step < 5; ++step) {
      auto [x, y] = mlp_batch(step, 24);
      Tensor xs = rows_of(x, rank, 2), ys = rows_of(y, rank, 2);
      opt.zero_grad();
      {
        auto guard = fsdp->no_sync();
        for (int m = 0; m < 2; ++m) {
          (F::cross_entropy(fsdp->forward(xs.narrow(0, 4 * m, 4)), ys.narrow(0, 4 * m, 4)) / 3.0).backward();
          for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
        }
      }
      (F::cross_entropy(fsdp->forward(xs.narrow(0, 8, 4)), ys.narrow(0, 8, 4)) / 3.0).backward();
      opt.step();
    }
    std::vector<Tensor> mine = full_parameters(*fsdp);
    if (rank != 0) return;
    auto reference = make_mlp(5);
    optim::Adam ref_opt(reference->parameters(), adam());
    for (int step = 0; step < 5; ++step) {
      auto [x, y] = mlp_batch(step, 24);
      // Rank r's micro-batch m holds rows 12 r + 4 m ...: the whole batch in
      // another order, whose mean is the same.
      ref_opt.zero_grad();
      F::cross_entropy(reference->forward(x), y).backward();
      ref_opt.step();
    }
    EXPECT_LE(relative_difference(mine, reference->parameters()), 1e-10);
  });
}

TEST(FSDP, ClipGradNormClipsByTheNormOfTheWholeModel) {
  run_on_ranks(3, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = make_mlp(8);
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, opts(group, mlp_policy()));
    auto [x, y] = mlp_batch(0, 6);
    F::cross_entropy(fsdp->forward(rows_of(x, rank, 3)), rows_of(y, rank, 3)).backward();
    const double norm = fsdp->clip_grad_norm_(0.01);
    const double inf_norm_after = fsdp->clip_grad_norm_(1e9, INFINITY);
    // The reference: one process, the whole batch, torch's clip_grad_norm_.
    auto reference = make_mlp(8);
    F::cross_entropy(reference->forward(x), y).backward();
    const double expected = optim::clip_grad_norm_(reference->parameters(), 0.01);
    double expected_inf = 0;
    for (const Tensor& p : reference->parameters()) {
      expected_inf = std::max(expected_inf, ops::max(ops::abs(p.grad())).item<double>());
    }
    EXPECT_NEAR(norm, expected, 1e-12 * expected);
    EXPECT_GT(norm, 0.01);  // so clipping happened
    EXPECT_NEAR(inf_norm_after, expected_inf, 1e-12);
  });
}

TEST(FSDP, ActivationCheckpointingInsideAUnitGivesTheSameTraining) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    std::vector<std::vector<Tensor>> results;
    for (bool checkpointed : {false, true}) {
      auto model = make_mlp(4, DType::Float64, checkpointed);
      optim::Adam opt(model->parameters(), adam());
      auto fsdp = std::make_shared<FullyShardedDataParallel>(model, opts(group, mlp_policy()));
      for (int s = 0; s < 10; ++s) {
        auto [x, y] = mlp_batch(s, 8);
        opt.zero_grad();
        F::cross_entropy(fsdp->forward(rows_of(x, rank, 2)), rows_of(y, rank, 2)).backward();
        opt.step();
      }
      results.push_back(full_parameters(*fsdp));
    }
    EXPECT_EQ(relative_difference(results[1], results[0]), 0.0);
  });
}

TEST(FSDP, Float32TrainingStaysWithinTheSingleProcessRunsOwnDrift) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    const int steps = 100;
    auto model = make_mlp(21, DType::Float32);
    optim::Adam opt(model->parameters(), adam());
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, opts(group, mlp_policy()));
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = mlp_batch(s, 12, DType::Float32);
      opt.zero_grad();
      F::cross_entropy(fsdp->forward(rows_of(x, rank, 2)), rows_of(y, rank, 2)).backward();
      opt.step();
    }
    std::vector<Tensor> mine = full_parameters(*fsdp);
    if (rank != 0) return;
    auto train = [&](bool nudge) {
      auto m = make_mlp(21, DType::Float32);
      if (nudge) {
        // One ulp up on every weight.
        NoGradGuard no_grad;
        for (Tensor& p : m->parameters()) {
          Tensor t = p;
          ops::mul_(t, 1.0 + std::ldexp(1.0, -23));
        }
      }
      optim::Adam o(m->parameters(), adam());
      for (int s = 0; s < steps; ++s) {
        auto [x, y] = mlp_batch(s, 12, DType::Float32);
        o.zero_grad();
        F::cross_entropy(m->forward(x), y).backward();
        o.step();
      }
      return m->parameters();
    };
    std::vector<Tensor> reference = train(false);
    const double drift = relative_difference(train(true), reference);
    const double difference = relative_difference(mine, reference);
    std::printf("float32: |FSDP - single| %.3g, single process's own drift for one ulp %.3g\n", difference, drift);
    EXPECT_GT(drift, 0.0);
    EXPECT_LE(difference, 2 * drift);
  });
}

// Compute (and gathers) in `low`, reductions and master shards in float32.
void expect_mixed_precision_near_float32(DType low) {
  run_on_ranks(2, [low](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    const int steps = 30;
    auto model = make_mlp(31, DType::Float32);
    optim::Adam opt(model->parameters(), adam());
    FSDPOptions options = opts(group, mlp_policy());
    options.mixed_precision.param_dtype = low;
    options.mixed_precision.reduce_dtype = DType::Float32;
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, options);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = mlp_batch(s, 12, DType::Float32);
      opt.zero_grad();
      Tensor logits = fsdp->forward(rows_of(x, rank, 2));
      EXPECT_EQ(logits.dtype(), low);
      F::cross_entropy(logits.to(DType::Float32), rows_of(y, rank, 2)).backward();
      for (const Tensor& p : model->parameters()) {
        EXPECT_EQ(p.dtype(), DType::Float32);  // the master shard
        EXPECT_EQ(p.grad().dtype(), DType::Float32);
      }
      opt.step();
    }
    std::vector<Tensor> mine = full_parameters(*fsdp);
    if (rank != 0) return;
    auto reference = make_mlp(31, DType::Float32);
    optim::Adam ref_opt(reference->parameters(), adam());
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = mlp_batch(s, 12, DType::Float32);
      ref_opt.zero_grad();
      F::cross_entropy(reference->forward(x), y).backward();
      ref_opt.step();
    }
    // The stated tolerance. Adam moves a weight by about lr per step
    // whatever the gradient's size, so two runs can differ by up to
    // 2 * steps * lr = 0.06 in any weight; a narrow mantissa (bfloat16's 8 bits) flips
    // the sign of small gradients now and then, which is what the largest
    // differences are. On average a weight must stay within 0.1 * steps * lr
    // (0.003) of float32's, and no weight may differ by more than 0.5 *
    // steps * lr.
    const auto ref = reference->parameters();
    double total = 0, count = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      total += ops::sum(ops::abs(ops::sub(mine[i], ref[i]))).item<double>();
      count += static_cast<double>(ref[i].numel());
    }
    const double mean = total / count, worst = relative_difference(mine, ref);
    std::printf("%s compute, float32 reduction: weights differ from float32 training by %.3g on average, "
                "%.3g at most\n", std::string(dtype_name(low)).c_str(), mean, worst);
    EXPECT_LE(mean, 0.1 * steps * 1e-3);
    EXPECT_LE(worst, 0.5 * steps * 1e-3);
    EXPECT_GT(worst, 0.0);
  });
}

TEST(FSDP, Bfloat16MixedPrecisionTrainsNearFloat32Training) { expect_mixed_precision_near_float32(DType::BFloat16); }

TEST(FSDP, Float16MixedPrecisionTrainsNearFloat32Training) { expect_mixed_precision_near_float32(DType::Float16); }

// ---- memory, as the allocator counts it --------------------------------------

// Four hidden layers of 256 (units of their own) and a small head (the root).
class DeepMlp : public nn::Module {
 public:
  DeepMlp() {
    for (int i = 0; i < 4; ++i) {
      layers.push_back(register_module("layer" + std::to_string(i), std::make_shared<nn::Linear>(256, 256)));
    }
    head = register_module("head", std::make_shared<nn::Linear>(256, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& layer : layers) h = relu((*layer)(h));
    return (*head)(h);
  }
  std::vector<std::shared_ptr<nn::Linear>> layers;
  std::shared_ptr<nn::Linear> head;
};

TEST(FSDP, FullShardHoldsAQuarterOfParametersGradientsAndAdamStatePlusTheLargestUnit) {
  run_on_ranks(
      4,
      [](int rank) {
        set_num_threads(1);
        auto group = make_test_group("gloo", kTimeout);
        const int64_t before = static_cast<int64_t>(cpu_allocated_bytes());
        manual_seed(2);
        auto model = std::make_shared<DeepMlp>();
        int64_t parameter_bytes = 0;
        for (const Tensor& p : model->parameters()) parameter_bytes += p.numel() * 4;
        const int64_t unit_bytes = (256 * 256 + 256) * 4;  // the largest unit: one hidden layer
        // Parameters, gradients and Adam's two moments, unsharded.
        const int64_t unsharded = 4 * parameter_bytes;
        auto fsdp = std::make_shared<FullyShardedDataParallel>(model, opts(group, fsdp::wrap_by_numel(10000)));
        optim::Adam opt(model->parameters(), adam());
        auto step = [&](int s) {
          Generator gen;
          gen.manual_seed(static_cast<uint64_t>(s));
          Tensor x = randn({4, 256}, DType::Float32, &gen);
          Tensor y = randint(0, 10, {4}, DType::Int64, &gen);
          opt.zero_grad();
          F::cross_entropy(fsdp->forward(x), y).backward();
          opt.step();
        };
        step(0);
        step(1);
        // After a step: this rank's shards, their gradients and Adam's state.
        // (The barrier lets Gloo's thread drop the last reduction's buffers.)
        group->barrier()->wait();
        const int64_t held = static_cast<int64_t>(cpu_allocated_bytes()) - before;
        cpu_reset_peak_allocated_bytes();
        step(2);
        const int64_t peak = static_cast<int64_t>(cpu_peak_allocated_bytes()) - before;
        std::printf("rank %d: unsharded parameters + gradients + Adam state %.1f KiB; held after a step %.1f KiB "
                    "(bound: 1/4 of it + the largest unit = %.1f KiB); peak during a step %.1f KiB\n",
                    rank, unsharded / 1024.0, held / 1024.0, (unsharded / 4 + unit_bytes) / 1024.0, peak / 1024.0);
        EXPECT_LE(held, unsharded / 4 + unit_bytes);
        EXPECT_GE(held, unsharded / 4 * 9 / 10);  // it does hold its quarter
        // During a step, on top, at most seven units: the computing unit's
        // full parameters, the prefetched units' (max_gathers_in_flight, 2:
        // Note [FSDP execution order]), its flat gradient buffer (Note [FSDP
        // gradients in place]) and the previous unit's, whose reduction is
        // in flight, one incoming gradient, and in backward the previous
        // unit's parameters until its last gradient has arrived (measured:
        // 6.1 units); activations are a few KiB.
        EXPECT_LE(peak, unsharded / 4 + 7 * unit_bytes);
      },
      slow_ranks());
}

// A GPT whose parameters, gradients and Adam state (29 MB in float32) do not
// fit a 20 MB cap on each process's tensor memory trains under FSDP on 4
// ranks (each holds a quarter) and runs out of memory under DDP.
TEST(FSDP, AGptTooLargeForTheMemoryCapTrainsUnderFsdpAndRunsOutUnderDdp) {
  run_on_ranks(
      4,
      [](int rank) {
        set_num_threads(1);
        nn::GPTConfig config;
        config.vocab_size = 256;
        config.block_size = 32;
        config.n_layer = 4;
        config.n_head = 4;
        config.n_embd = 192;
        const int64_t cap = int64_t{20} << 20;
        const int64_t unsharded = 4 * 4 * config.num_parameters();
        ASSERT_GT(unsharded, cap);
        auto batch = [&](int s) {
          Generator gen;
          gen.manual_seed(static_cast<uint64_t>(s));
          Tensor tokens = randint(0, 256, {2, 33}, DType::Int64, &gen);
          return std::make_pair(tokens.narrow(1, 0, 32).contiguous(), tokens.narrow(1, 1, 32).contiguous());
        };
        struct CapGuard {
          explicit CapGuard(int64_t bytes) { set_cpu_memory_limit(cpu_allocated_bytes() + bytes); }
          ~CapGuard() { set_cpu_memory_limit(0); }
        };
        {
          auto group = make_test_group("gloo", kTimeout);
          CapGuard guard(cap);
          manual_seed(3);
          auto model = std::make_shared<nn::GPT>(config);
          optim::AdamW opt(model->parameters(), optim::AdamWOptions());
          auto fsdp = std::make_shared<FullyShardedDataParallel>(
              model, opts(group, fsdp::wrap_by_class<nn::gpt::Block>()));
          for (int s = 0; s < 3; ++s) {
            auto [x, y] = batch(s);
            opt.zero_grad();
            nn::GPT::loss_from_logits(fsdp->forward(x), y).backward();
            opt.step();
          }
          std::printf("rank %d: FSDP trained under the cap; peak %.1f MiB\n", rank,
                      static_cast<double>(cpu_peak_allocated_bytes()) / (1 << 20));
        }
        {
          auto group = make_test_group("gloo", kTimeout);
          CapGuard guard(cap);
          manual_seed(3);
          auto model = std::make_shared<nn::GPT>(config);
          try {
            DDPOptions options;
            options.group = group;
            auto ddp = std::make_shared<DistributedDataParallel>(model, options);
            optim::AdamW opt(model->parameters(), optim::AdamWOptions());
            for (int s = 0; s < 3; ++s) {
              auto [x, y] = batch(s);
              opt.zero_grad();
              nn::GPT::loss_from_logits(ddp->forward(x), y).backward();
              opt.step();
            }
            ADD_FAILURE() << "DDP trained a model that does not fit the cap";
          } catch (const Error& e) {
            std::printf("rank %d: DDP: %s\n", rank, e.what());
            EXPECT_NE(std::string(e.what()).find("CpuAllocator: out of memory"), std::string::npos) << e.what();
          }
        }
      },
      slow_ranks());
}

// ---- prefetching -----------------------------------------------------------

TEST(FSDP, PrefetchIssuesTheNextUnitsGatherBeforeTheCurrentUnitComputes) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = make_mlp(6);
    FSDPOptions options = opts(group, mlp_policy());
    options.record_events = true;
    options.max_gathers_in_flight = 1;
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, options);
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = mlp_batch(s, 8);
      if (s == 1) fsdp->clear_events();
      F::cross_entropy(fsdp->forward(rows_of(x, rank, 2)), rows_of(y, rank, 2)).backward();
    }
    ASSERT_EQ(fsdp->forward_order(), (std::vector<size_t>{1, 2, 3}));
    // When did each thing happen in the second step, forward then backward.
    auto when = [&](fsdp::FSDPEvent::Kind kind, size_t unit, bool backward) {
      for (const auto& e : fsdp->events()) {
        if (e.kind == kind && e.unit == unit && e.in_backward == backward) return e.seconds;
      }
      ADD_FAILURE() << "no " << fsdp::fsdp_event_name(kind) << " of unit " << unit;
      return -1.0;
    };
    using K = fsdp::FSDPEvent::Kind;
    // Forward: unit 2's gather is in flight while unit 1 computes, unit 3's while unit 2 does.
    EXPECT_LT(when(K::GatherIssued, 2, false), when(K::ForwardBegin, 1, false));
    EXPECT_LT(when(K::GatherIssued, 3, false), when(K::ForwardBegin, 2, false));
    // Backward: the last unit's gather is issued as backward begins (from
    // the root), before that unit's own backward does; unit 2's as unit 3's
    // backward begins, before unit 3's reduction.
    EXPECT_LT(when(K::GatherIssued, 3, true), when(K::BackwardBegin, 3, true));
    EXPECT_LT(when(K::GatherIssued, 2, true), when(K::ReduceIssued, 3, true));
    EXPECT_LT(when(K::GatherIssued, 1, true), when(K::ReduceIssued, 2, true));
    for (const auto& e : fsdp->events()) {
      std::printf("%-15s unit %zu %s %.6f%s\n", fsdp::fsdp_event_name(e.kind), e.unit,
                  e.in_backward ? "backward" : "forward ", e.seconds,
                  e.kind == K::GatherWaited && e.gather_was_complete ? " (had arrived)" : "");
    }
  });
}

// ---- ranks out of step -----------------------------------------------------

// Two units of the same size; `skip` leaves the second out, `swap` runs them
// in the other order.
class TwoEqualUnits : public nn::Module {
 public:
  TwoEqualUnits() {
    a = register_module("a", std::make_shared<nn::Linear>(8, 8));
    b = register_module("b", std::make_shared<nn::Linear>(8, 8));
    to(DType::Float64);
  }
  Tensor forward(const Tensor& x) override {
    if (skip) return (*a)(x);
    return swap ? (*a)((*b)(x)) : (*b)((*a)(x));
  }
  std::shared_ptr<nn::Linear> a, b;
  bool skip = false, swap = false;
};

void expect_out_of_step_rank_is_named(bool swap) {
  RankOptions ranks;
  ranks.deadline = std::chrono::seconds(60);
  run_on_ranks(
      2,
      [swap](int rank) {
        auto group = make_test_group("gloo", kTimeout);
        auto model = std::make_shared<TwoEqualUnits>();
        auto fsdp = std::make_shared<FullyShardedDataParallel>(
            model, opts(group, fsdp::wrap_by_numel(10)));
        ASSERT_EQ(fsdp->units().size(), 2u);
        ASSERT_EQ(fsdp->units()[0].numel, fsdp->units()[1].numel);
        if (rank == 1) (swap ? model->swap : model->skip) = true;
        const auto start = std::chrono::steady_clock::now();
        try {
          Tensor x = ones({2, 8}, DType::Float64);
          sum(fsdp->forward(x)).backward();
          ADD_FAILURE() << "rank " << rank << " trained on with a peer out of step";
        } catch (const Error& e) {
          std::string message = e.what();
          std::printf("rank %d: %s\n", rank, message.c_str());
          EXPECT_NE(message.find("FSDP: the "), std::string::npos) << message;
          EXPECT_NE(message.find("unit "), std::string::npos) << message;
          EXPECT_NE(message.find("rank"), std::string::npos) << message;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
      },
      ranks);
}

TEST(FSDP, ARankThatSkipsAUnitIsToldWhichUnitInsteadOfHanging) { expect_out_of_step_rank_is_named(false); }

TEST(FSDP, RanksThatRunUnitsInAnotherOrderAreToldWhichUnit) { expect_out_of_step_rank_is_named(true); }

// ---- bad input ---------------------------------------------------------------

TEST(FSDP, BadOptionsAreRefusedNamingWhatIsWrong) {
  EXPECT_EQ(fsdp::parse_sharding_strategy("full-shard"), ShardingStrategy::FullShard);
  EXPECT_EQ(fsdp::parse_sharding_strategy("HYBRID_SHARD"), ShardingStrategy::HybridShard);
  try {
    fsdp::parse_sharding_strategy("zero3");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FSDP: unknown sharding strategy 'zero3'"), std::string::npos);
  }
  auto model = make_mlp(1);
  EXPECT_THROW(fsdp::wrap_by_names(*model, {"fc1", "fc9"}), Error);
  EXPECT_THROW(fsdp::wrap_by_numel(0), Error);
  run_on_ranks(2, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    FSDPOptions options = opts(group);
    options.strategy = ShardingStrategy::HybridShard;
    options.hybrid_shard_size = 3;
    try {
      FullyShardedDataParallel fsdp(make_mlp(1), options);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("HYBRID_SHARD's shard groups of 3 ranks must divide the group's 2 ranks"),
                std::string::npos)
          << e.what();
    }
  });
}

// A gradient reduced by two wrappers would be averaged twice: DDP, ZeRO's
// stage 2 and FSDP each claim their parameters while they live.
TEST(FSDP, AParameterWhoseGradientAnotherWrapperReducesIsRefused) {
  run_on_ranks(2, [](int) {
    auto group = make_test_group("gloo", kTimeout);
    auto model = make_mlp(1);
    auto adam_factory = optimizer_factory<optim::Adam>(adam());
    ZeroOptions stage2;
    stage2.group = group;
    stage2.stage = 2;
    auto expect_refused = [](const std::function<void()>& make, const std::string& expected) {
      try {
        make();
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    };
    {
      DDPOptions options;
      options.group = group;
      auto ddp = std::make_shared<DistributedDataParallel>(model, options);
      expect_refused([&] { ZeroRedundancyOptimizer zero(model->parameters(), adam_factory, stage2); },
                     "ZeroRedundancyOptimizer (stage 2): parameter 'group 0 #0' already has its gradient reduced by "
                     "DistributedDataParallel; one gradient reduced by both would be averaged twice");
      expect_refused([&] { FullyShardedDataParallel fsdp(model, opts(group)); },
                     "FSDP: parameter 'fc1.weight' already has its gradient reduced by DistributedDataParallel");
      // Stage 1 goes with DDP: it reduces nothing itself.
      ZeroOptions stage1;
      stage1.group = group;
      ZeroRedundancyOptimizer zero(model->parameters(), adam_factory, stage1);
    }
    // Once DDP is gone its claim is too.
    ZeroRedundancyOptimizer zero(model->parameters(), adam_factory, stage2);
    DDPOptions options;
    options.group = group;
    expect_refused([&] { DistributedDataParallel ddp(model, options); },
                   "DistributedDataParallel: parameter 'fc1.weight' already has its gradient reduced by "
                   "ZeroRedundancyOptimizer (stage 2)");
  });
}

TEST(FSDP, RanksWithDifferentModelsAreToldWhichParameterDiffers) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", kTimeout);
    manual_seed(1);
    std::shared_ptr<nn::Module> model = rank == 0 ? std::shared_ptr<nn::Module>(std::make_shared<nn::Linear>(4, 3))
                                                  : std::make_shared<nn::Linear>(4, 5);
    try {
      FullyShardedDataParallel fsdp(model, opts(group));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("FSDP: parameter 0 ('weight')"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
