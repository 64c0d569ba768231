// Pipeline parallelism over gloo ranks equals single-process training: every
// schedule, 2 and 4 stages, micro-batch counts from the schedule's minimum
// to 3x the stages with an uneven last micro-batch, on LeNet (as a Sequential)
// and on a GPT with tied embeddings (float64, 50 steps). And the ways a
// pipeline goes wrong fail on every rank with a message naming the stage.
#include "distributed/pipeline/pipeline.h"

#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <cmath>
#include <string>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "kiln.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/models/gpt.h"
#include "nn/models/lenet.h"
#include "nn/models/gpt_stages.h"
#include "nn/pooling.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tests/distributed/multi_process.h"
#include "tests/distributed/store_test_util.h"

namespace kiln::distributed::pipeline {
namespace {

using testing::error_of;
using testing::make_test_group;
using testing::run_on_ranks;
namespace F = nn::functional;

// LeNet (nn/models/lenet.h) as the Sequential of its 12 modules
// (LeNet::as_sequential, keys conv1.weight ...), float64.
std::shared_ptr<nn::Sequential> make_lenet(uint64_t seed) {
  manual_seed(seed);
  auto lenet = std::make_shared<nn::LeNet>();
  lenet->to(DType::Float64);
  return lenet->as_sequential();
}

std::pair<Tensor, Tensor> images_for(int step, int64_t batch) {
  Generator gen(500 + static_cast<uint64_t>(step));
  return {randn({batch, 3, 32, 32}, DType::Float64, &gen), randint(0, 10, {batch}, DType::Int64, &gen)};
}

std::pair<Tensor, Tensor> tokens_for(int step, int64_t batch, const nn::GPTConfig& config) {
  Generator gen(900 + static_cast<uint64_t>(step));
  return {randint(0, config.vocab_size, {batch, config.block_size}, DType::Int64, &gen),
          randint(0, config.vocab_size, {batch, config.block_size}, DType::Int64, &gen)};
}

// A batch that gives m micro-batches whose last is smaller (torch.chunk's
// sizes: 2 each and 1 last), or 3 examples for one micro-batch.
int64_t batch_for_micro_batches(int m) { return m == 1 ? 3 : 2 * m - 1; }

struct PipeSetup {
  std::string name;
  int stages_per_rank;
  int micro_batches;
};

// Every schedule, from its fewest micro-batches to 3x the ranks (on 4
// ranks, whose processes share CI's 2 cores, the ends of that range only).
std::vector<PipeSetup> setups(int p) {
  std::vector<PipeSetup> out;
  for (const char* name : {"gpipe", "1f1b", "zero-bubble"})
    for (int m : {1, p, 3 * p})
      if (p <= 2 || m != p) out.push_back({name, 1, m});
  for (int m : {p, 3 * p}) out.push_back({"interleaved", 2, m});
  return out;
}

// Ranks killed after `deadline` seconds, the others `after_failure` seconds
// after the first failure.
testing::RankOptions within(int deadline, int after_failure = 5) {
  testing::RankOptions options;
  options.deadline = std::chrono::seconds(deadline);
  options.after_failure = std::chrono::seconds(after_failure);
  return options;
}

// |a - b| <= 1e-10 |b| elementwise (plus a floor for values near zero).
void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  const double diff = max(abs(a - b)).item<double>();
  const double scale = max(abs(b)).item<double>();
  EXPECT_LE(diff, 1e-10 * std::max(scale, 1e-3)) << what << ": " << diff << " against a scale of " << scale;
}

void run_lenet(int rank, int p, const std::shared_ptr<ProcessGroup>& group, const PipeSetup& setup, bool checkpoint) {
  SCOPED_TRACE(::testing::Message() << setup.name << " p=" << p << " m=" << setup.micro_batches
                                  << (checkpoint ? " checkpointed" : ""));
  const Schedule schedule = make_schedule(setup.name, p, setup.micro_batches, setup.stages_per_rank);
  auto reference = make_lenet(7);
  auto model = make_lenet(7);
  const auto balance = balance_by_parameters(*model, schedule.num_stages);
  const auto stages = split_sequential(*model, balance);
  std::map<int, std::shared_ptr<nn::Module>> mine;
  for (int s : schedule.stages_of(rank)) mine[s] = stages[s];
  auto loss_fn = [](const TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); };
  PipelineOptions options;
  options.checkpoint_activations = checkpoint;
  Pipeline pipe(schedule, mine, loss_fn, group, options);
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  // With 8 stages of 12 modules some stages hold only activations and
  // pooling: a rank may have nothing to optimize.
  std::unique_ptr<optim::SGD> opt;
  if (!pipe.parameters().empty())
    opt = std::make_unique<optim::SGD>(pipe.parameters(), optim::SGDOptions(0.05).momentum(0.9));
  const int64_t batch = batch_for_micro_batches(setup.micro_batches);
  for (int step = 0; step < 50; ++step) {
    auto [x, y] = images_for(step, batch);
    ref_opt.zero_grad();
    Tensor ref_loss = F::cross_entropy((*reference)(x), y);
    ref_loss.backward();
    ref_opt.step();
    if (opt) opt->zero_grad();
    Tensor loss = pipe.step({x}, y);
    if (opt) opt->step();
    if (pipe.holds_last_stage()) {
      ASSERT_TRUE(loss.defined());
      EXPECT_NEAR(loss.item<double>(), ref_loss.item<double>(), 1e-12 * std::abs(ref_loss.item<double>()));
    } else {
      EXPECT_FALSE(loss.defined());
    }
  }
  const auto ref_stages = split_sequential(*reference, balance);
  for (const auto& [s, stage] : mine) {
    const TensorDict want = ref_stages[s]->named_parameters();
    for (const auto& [name, value] : stage->named_parameters())
      expect_close(value, want.at(name), "stage " + std::to_string(s) + " " + name);
  }
}

TEST(Pipeline, LeNetOnTwoRanksEqualsSingleProcessForEverySchedule) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(30));
    for (const PipeSetup& setup : setups(2)) run_lenet(rank, 2, group, setup, false);
    run_lenet(rank, 2, group, {"1f1b", 1, 4}, /*checkpoint=*/true);
  }, within(240));
}

TEST(Pipeline, LeNetOnFourRanksEqualsSingleProcessForEverySchedule) {
  run_on_ranks(4, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(60));
    for (const PipeSetup& setup : setups(4)) run_lenet(rank, 4, group, setup, false);
  }, within(400));
}

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig config;
  config.vocab_size = 13;
  config.block_size = 8;
  config.n_layer = 4;
  config.n_head = 2;
  config.n_embd = 16;
  return config;
}

std::shared_ptr<nn::GPT> make_gpt(uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::GPT>(tiny_gpt());
  model->to(DType::Float64);
  return model;
}

void run_gpt(int rank, int p, const std::shared_ptr<ProcessGroup>& group, const PipeSetup& setup) {
  SCOPED_TRACE(::testing::Message() << "GPT " << setup.name << " p=" << p << " m=" << setup.micro_batches);
  const Schedule schedule = make_schedule(setup.name, p, setup.micro_batches, setup.stages_per_rank);
  const nn::GPTConfig config = tiny_gpt();
  auto reference = make_gpt(11);
  auto model = make_gpt(11);
  nn::gpt::StageSplit split =
      nn::gpt::split_into_stages(*model, nn::gpt::even_balance(config.n_layer, schedule.num_stages));
  std::map<int, std::shared_ptr<nn::Module>> mine;
  for (int s : schedule.stages_of(rank)) mine[s] = split.stages[s];
  auto loss_fn = [](const TensorList& out, const Tensor& y) { return nn::GPT::loss_from_logits(out[0], y); };
  PipelineOptions options;
  options.tied = split.tied;
  Pipeline pipe(schedule, mine, loss_fn, group, options);
  optim::AdamW ref_opt(reference->parameters(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  optim::AdamW opt(pipe.parameters(), optim::AdamWOptions(1e-2).weight_decay(0.1));
  const int64_t batch = batch_for_micro_batches(setup.micro_batches);
  for (int step = 0; step < 50; ++step) {
    auto [x, y] = tokens_for(step, batch, config);
    ref_opt.zero_grad();
    reference->loss(x, y).backward();
    const double ref_norm = optim::clip_grad_norm_(reference->parameters(), 0.5);
    ref_opt.step();
    opt.zero_grad();
    pipe.step({x}, y);
    const double norm = pipe.clip_grad_norm_(0.5);
    EXPECT_NEAR(norm, ref_norm, 1e-10 * ref_norm) << "step " << step;
    opt.step();
  }
  const TensorDict want = reference->state_dict();
  for (const auto& [s, stage] : mine)
    for (const auto& [name, value] : stage->named_parameters())
      expect_close(value, want.at(name), "stage " + std::to_string(s) + " " + name);
}

TEST(Pipeline, GptWithTiedEmbeddingsOnTwoRanksEqualsSingleProcessForEverySchedule) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(30));
    for (const PipeSetup& setup : setups(2)) run_gpt(rank, 2, group, setup);
  }, within(240));
}

TEST(Pipeline, GptOnFourRanksEqualsSingleProcessForEverySchedule) {
  run_on_ranks(4, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(60));
    for (const PipeSetup& setup : setups(4)) run_gpt(rank, 4, group, setup);
  }, within(400));
}

// Stage boundaries of several tensors, one of them not floating point:
// stage 0 returns {tanh(fc(x)), x's row labels (Int64), fc(x) squared};
// stage 1 mixes the two floating ones and masks rows by their label.
class FirstOfTwo : public nn::Module {
 public:
  FirstOfTwo() { fc = register_module("fc", std::make_shared<nn::Linear>(4, 6)); }
  TensorList forward_many(const TensorList& in) override {
    Tensor h = (*fc)(in[0]);
    return {tanh(h), in[1], h * h};
  }
  std::shared_ptr<nn::Linear> fc;
};

class SecondOfTwo : public nn::Module {
 public:
  SecondOfTwo() { fc = register_module("fc", std::make_shared<nn::Linear>(6, 3)); }
  TensorList forward_many(const TensorList& in) override {
    Tensor keep = ops::lt(in[1], 4).to(DType::Float64).unsqueeze(1);  // (B, 1): rows labelled below 4
    return {(*fc)(in[0] * keep + in[2] * 0.25)};
  }
  std::shared_ptr<nn::Linear> fc;
};

TEST(Pipeline, SeveralTensorsCrossTheStages) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(30));
    manual_seed(4);
    auto first = std::make_shared<FirstOfTwo>();
    auto second = std::make_shared<SecondOfTwo>();
    first->to(DType::Float64);
    second->to(DType::Float64);
    for (const char* name : {"gpipe", "1f1b", "zero-bubble"}) {
      SCOPED_TRACE(name);
      for (const Tensor& p : first->parameters()) p.set_grad(Tensor());
      for (const Tensor& p : second->parameters()) p.set_grad(Tensor());
      std::map<int, std::shared_ptr<nn::Module>> mine;
      if (rank == 0) mine[0] = first;
      else mine[1] = second;
      Pipeline pipe(make_schedule(name, 2, 3), mine,
                    [](const TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); }, group);
      Generator gen(8);
      Tensor x = randn({7, 4}, DType::Float64, &gen), labels = arange(0, 7, 1, DType::Int64);
      Tensor y = randint(0, 3, {7}, DType::Int64, &gen);
      Tensor loss = pipe.step({x, labels}, y);
      // The step's durations per stage (what bench/pipeline simulates):
      // this rank's one stage, each of its 3 micro-batches' actions timed.
      const StepTimes& times = pipe.last_step_times();
      ASSERT_EQ(times.stage_costs.size(), 1u);
      ASSERT_EQ(times.stage_costs.count(rank), 1u);
      const ActionCosts& costs = times.stage_costs.at(rank);
      EXPECT_GT(costs.forward, 0.0);
      if (std::string(name) == "zero-bubble") {
        EXPECT_EQ(costs.backward, 0.0);
        EXPECT_GT(costs.backward_input, 0.0);
        EXPECT_GT(costs.backward_weight, 0.0);
      } else {
        EXPECT_GT(costs.backward, 0.0);
        EXPECT_EQ(costs.backward_input, 0.0);
        EXPECT_EQ(costs.backward_weight, 0.0);
      }
      const double per_micro_batch = costs.forward + costs.backward + costs.backward_input + costs.backward_weight;
      EXPECT_NEAR(3 * per_micro_batch, times.compute_seconds, 1e-9 * times.compute_seconds);
      // The same two modules in one process, on the whole batch.
      const TensorList in_pipeline = rank == 0 ? TensorList{first->fc->weight.grad()} : TensorList{second->fc->weight.grad()};
      for (const Tensor& p : first->parameters()) p.set_grad(Tensor());
      for (const Tensor& p : second->parameters()) p.set_grad(Tensor());
      Tensor want = F::cross_entropy((*second)((*first)({x, labels}))[0], y);
      want.backward();
      const Tensor single = rank == 0 ? first->fc->weight.grad() : second->fc->weight.grad();
      EXPECT_LE(max(abs(in_pipeline[0] - single)).item<double>(), 1e-14);
      if (rank == 1) {
        EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-14);
      }
    }
  });
}

// 4 ranks as 2 pipelines of 2 stages: rank r is stage r % 2 of pipeline
// (replica) r / 2; the pipeline groups are {0, 1} and {2, 3}, the
// data-parallel groups of the stages {0, 2} and {1, 3}.
struct TwoByTwo {
  explicit TwoByTwo(int rank)
      : replica(rank / 2), stage(rank % 2), world(make_test_group("gloo", std::chrono::seconds(60))) {
    ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(60);
    // Every rank makes every group, in the same order; each keeps its own.
    for (int r = 0; r < 2; ++r)
      if (auto g = world->new_subgroup({2 * r, 2 * r + 1}, options)) pipeline_group = g;
    for (int s = 0; s < 2; ++s)
      if (auto g = world->new_subgroup({s, s + 2}, options)) data_group = g;
  }
  int replica, stage;
  std::shared_ptr<ProcessGroup> world, pipeline_group, data_group;
};

// 20 steps of `pipe` (this rank's stage of the grid) beside `reference`, one
// process on the whole batch of 10: this replica trains on its half, and both
// sides clip the gradients to norm 1, the norms compared.
void train_beside_one_process(const TwoByTwo& grid, Pipeline& pipe, nn::Module& reference) {
  optim::SGD ref_opt(reference.parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < 20; ++step) {
    auto [x, y] = images_for(step, 10);
    ref_opt.zero_grad();
    F::cross_entropy(reference(x), y).backward();
    const double ref_norm = optim::clip_grad_norm_(reference.parameters(), 1.0);
    ref_opt.step();
    opt.zero_grad();
    pipe.step({x.narrow(0, 5 * grid.replica, 5)}, y.narrow(0, 5 * grid.replica, 5));
    EXPECT_NEAR(pipe.clip_grad_norm_(1.0), ref_norm, 1e-10 * ref_norm) << "step " << step;
    opt.step();
  }
}

// Two pipelines of 2 stages side by side on 4 ranks, each stage a
// DistributedDataParallel over the two ranks holding it: each replica trains
// on half of every batch, and the result is one process on the whole batch,
// clipping by the global norm included.
TEST(Pipeline, DataParallelStagesEqualSingleProcess) {
  run_on_ranks(4, [](int rank) {
    const TwoByTwo grid(rank);
    const int stage = grid.stage;
    const auto& pipeline_group = grid.pipeline_group;
    const auto& data_group = grid.data_group;
    for (const char* name : {"gpipe", "1f1b", "zero-bubble"}) {
      SCOPED_TRACE(name);
      auto reference = make_lenet(21), model = make_lenet(21);
      const std::vector<int64_t> balance = {7, 5};
      auto stages = split_sequential(*model, balance);
      DDPOptions ddp_options;
      ddp_options.group = data_group;
      auto ddp = std::make_shared<DistributedDataParallel>(stages[stage], ddp_options);
      auto loss_fn = [](const TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); };
      Pipeline pipe(make_schedule(name, 2, 3), {{stage, ddp}}, loss_fn, pipeline_group);
      train_beside_one_process(grid, pipe, *reference);
      const TensorDict want = split_sequential(*reference, balance)[stage]->named_parameters();
      for (const auto& [key, value] : stages[stage]->named_parameters()) expect_close(value, want.at(key), key);
    }
  }, within(300));
}

// The same with each stage a FullyShardedDataParallel (FULL_SHARD) over the
// two ranks holding it (its shards' norms summed over the shard group).
TEST(Pipeline, ShardedStagesEqualSingleProcess) {
  run_on_ranks(4, [](int rank) {
    const TwoByTwo grid(rank);
    const int stage = grid.stage;
    const auto& pipeline_group = grid.pipeline_group;
    const auto& data_group = grid.data_group;
    for (const char* name : {"gpipe", "1f1b"}) {
      SCOPED_TRACE(name);
      auto reference = make_lenet(23), model = make_lenet(23);
      const std::vector<int64_t> balance = {7, 5};
      auto stages = split_sequential(*model, balance);
      fsdp::FSDPOptions fsdp_options;
      fsdp_options.group = data_group;
      auto sharded = std::make_shared<fsdp::FullyShardedDataParallel>(stages[stage], fsdp_options);
      auto loss_fn = [](const TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); };
      Pipeline pipe(make_schedule(name, 2, 3), {{stage, sharded}}, loss_fn, pipeline_group);
      train_beside_one_process(grid, pipe, *reference);
      const TensorDict want = split_sequential(*reference, balance)[stage]->named_parameters();
      sharded->with_full_parameters([&] {
        for (const auto& [key, value] : stages[stage]->named_parameters()) expect_close(value, want.at(key), key);
      }, /*writeback=*/false);
      if (std::string(name) == "1f1b") {
        const std::string e = error_of([&] { Pipeline(zero_bubble(2, 3), {{stage, sharded}}, loss_fn, pipeline_group); });
        EXPECT_NE(e.find("is a FullyShardedDataParallel, whose backward cannot be split into I and W"),
                  std::string::npos)
            << e;
      }
    }
  }, within(300));
}

// ---- what goes wrong ----

// Two Linear stages of width 4, float64, and their pipeline on `group`.
struct TwoStages {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<Pipeline> pipe;
};

TwoStages two_stages(int rank, const std::shared_ptr<ProcessGroup>& group, int micro_batches) {
  TwoStages t;
  manual_seed(3);
  t.model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Linear>(4, 3)});
  t.model->to(DType::Float64);
  auto stages = split_sequential(*t.model, {1, 1});
  t.pipe = std::make_unique<Pipeline>(one_f_one_b(2, micro_batches),
                                      std::map<int, std::shared_ptr<nn::Module>>{{rank, stages[rank]}},
                                      [](const TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); },
                                      group);
  return t;
}

TEST(Pipeline, ABatchTooSmallForTheMicroBatchesFailsOnEveryRank) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(10));
    TwoStages t = two_stages(rank, group, 4);
    Tensor x = randn({2, 4}, DType::Float64), y = zeros({2}, DType::Int64);
    const std::string e = error_of([&] { t.pipe->step({x}, y); });
    if (rank == 0)
      EXPECT_NE(e.find("a batch of 2 examples cannot be split into 4 micro-batches"), std::string::npos) << e;
    else
      EXPECT_NE(e.find("stage 0's rank could not split its batch into 4 micro-batches"), std::string::npos) << e;
  });
}

TEST(Pipeline, ATargetOfAnotherSizeIsNamedOnTheLastStage) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(5));
    TwoStages t = two_stages(rank, group, 2);
    Tensor x = randn({4, 4}, DType::Float64), y = zeros({3}, DType::Int64);
    const std::string e = error_of([&] { t.pipe->step({x}, y); });
    if (rank == 1)
      EXPECT_NE(e.find("the target has shape [3] but the batch on stage 0's rank has 4 examples"), std::string::npos)
          << e;
    else
      EXPECT_NE(e, "<no error>") << "rank 0 must fail too once rank 1 has stopped";
  }, within(60, 30));
}

// Returns its input's first `width` columns: a stage whose outputs change shape.
class Narrowing : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return x.narrow(1, 0, width); }
  int64_t width = 4;
};

TEST(Pipeline, AStageWhoseOutputsChangeShapeIsNamedWithItsMicroBatch) {
  run_on_ranks(2, [](int rank) {
    auto group = make_test_group("gloo", std::chrono::seconds(5));
    auto narrowing = std::make_shared<Narrowing>();
    std::map<int, std::shared_ptr<nn::Module>> mine;
    if (rank == 0) mine[0] = narrowing;
    else mine[1] = std::make_shared<nn::Identity>();
    Pipeline pipe(gpipe(2, 2), mine, [](const TensorList& out, const Tensor& y) { return F::mse_loss(out[0], y); },
                  group);
    Tensor x = randn({4, 6}, DType::Float64), y = zeros({4, 4}, DType::Float64);
    EXPECT_EQ(error_of([&] { pipe.step({x}, y); }), "<no error>");
    narrowing->width = 3;
    const std::string e = error_of([&] { pipe.step({x}, y); });
    if (rank == 0)
      EXPECT_NE(e.find("pipeline stage 0, micro-batch 0: the outputs are [float64 [2, 3]] but were "
                       "[float64 [2, 4]] for micro-batches of 2 examples"),
                std::string::npos)
          << e;
    else
      EXPECT_NE(e, "<no error>") << "rank 1 must fail too once rank 0 has stopped";
  }, within(60, 30));
}

TEST(Pipeline, ConstructionChecksTheScheduleAgainstTheGroupAndTheModules) {
  run_on_ranks(1, [](int) {
    auto group = make_test_group("gloo", std::chrono::seconds(5));
    auto loss = [](const TensorList& out, const Tensor& y) { return F::mse_loss(out[0], y); };
    auto linear = std::make_shared<nn::Linear>(2, 2);
    using Stages = std::map<int, std::shared_ptr<nn::Module>>;
    EXPECT_NE(error_of([&] { Pipeline(gpipe(2, 2), Stages{{0, linear}}, loss, group); })
                  .find("schedule 'gpipe' is for 2 ranks but the process group has 1"),
              std::string::npos);
    EXPECT_NE(error_of([&] { Pipeline(gpipe(1, 2), Stages{}, loss, group); })
                  .find("rank 0 runs stage 0 in schedule 'gpipe' but was given no module for it"),
              std::string::npos);
    EXPECT_NE(error_of([&] { Pipeline(gpipe(1, 2), Stages{{0, linear}, {1, linear}}, loss, group); })
                  .find("was given a module for stage 1"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                PipelineOptions options;
                options.tied = {{{0, "weight"}, {0, "nope"}}};
                Pipeline(gpipe(1, 2), Stages{{0, linear}}, loss, group, options);
              }).find("stage 0 has no parameter 'nope' to tie"),
              std::string::npos);
    PipelineOptions lone;
    lone.tied = {{{0, "weight"}}};
    EXPECT_NE(error_of([&] { Pipeline(gpipe(1, 2), Stages{{0, linear}}, loss, group, lone); })
                  .find("a tied parameter needs at least two holders, got 1"),
              std::string::npos);
    PipelineOptions far;
    far.tied = {{{0, "weight"}, {3, "weight"}}};
    EXPECT_NE(error_of([&] { Pipeline(gpipe(1, 2), Stages{{0, linear}}, loss, group, far); })
                  .find("tied parameter 'weight' names stage 3 outside 0..0"),
              std::string::npos);
    EXPECT_NE(error_of([&] { Pipeline(gpipe(1, 2), Stages{{0, linear}}, nullptr, group); }).find("no loss function"),
              std::string::npos);
    EXPECT_NE(error_of([&] { Pipeline(gpipe(1, 2), Stages{{0, linear}}, loss, nullptr); }).find("no process group"),
              std::string::npos);
    // One rank, one stage: the pipeline is plain gradient accumulation.
    Pipeline pipe(gpipe(1, 2), Stages{{0, linear}}, loss, group);
    Tensor x = randn({4, 2}), y = randn({4, 2});
    EXPECT_NE(error_of([&] { pipe.step({}, y); }).find("rank 0 runs stage 0 and needs its inputs"),
              std::string::npos);
    EXPECT_NE(error_of([&] { pipe.step({x, x.narrow(0, 0, 3)}, y); })
                  .find("input 1 has shape [3, 2] but input 0 has 4 examples"),
              std::string::npos);
    Tensor loss_value = pipe.step({x}, y);
    Tensor want = F::mse_loss((*linear)(x), y);
    EXPECT_NEAR(loss_value.item<double>(), want.item<double>(), 1e-6);
  });
}

TEST(Pipeline, SplittingBalancesModulesByCost) {
  EXPECT_EQ(balance_by_costs({1, 1, 1, 1}, 2), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(balance_by_costs({4, 1, 1, 1, 1}, 2), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(balance_by_costs({1, 2, 3, 4, 5}, 3), (std::vector<int64_t>{3, 1, 1}));
  EXPECT_EQ(balance_by_costs({0, 0, 0}, 3), (std::vector<int64_t>{1, 1, 1}));
  auto cnn = make_lenet(1);
  // conv1 456, conv2 2416, fc1 48120, fc2 10164, fc3 850 parameters: fc1
  // (module 7) is the largest stage whatever the cut, and the parameter-free
  // modules before it go with it, those after fc2 with the last stage.
  EXPECT_EQ(balance_by_parameters(*cnn, 3), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(balance_by_parameters(*cnn, 2), (std::vector<int64_t>{8, 4}));
  const auto balance = balance_by_time(*cnn, images_for(0, 2).first, 2, 1);
  EXPECT_EQ(balance.size(), 2u);
  EXPECT_EQ(balance[0] + balance[1], 12);
  for (const Tensor& p : cnn->parameters()) EXPECT_FALSE(p.grad().defined());
  auto stages = split_sequential(*cnn, {7, 5});
  EXPECT_EQ(stages[1]->named_parameters().keys().front(), "fc1.weight");
  EXPECT_EQ(stages[0]->named_parameters().at("conv1.weight").impl(),
            cnn->named_parameters().at("conv1.weight").impl());
  EXPECT_NE(error_of([&] { split_sequential(*cnn, {7, 4}); }).find("adds up to 11 modules but the model has 12"),
            std::string::npos);
  EXPECT_NE(error_of([&] { split_sequential(*cnn, {12, 0}); }).find("stage 1 gets 0 modules"), std::string::npos);
  auto relu = std::make_shared<nn::ReLU>();
  nn::Sequential twice(std::vector<std::shared_ptr<nn::Module>>{relu, std::make_shared<nn::Linear>(2, 2), relu});
  EXPECT_NE(error_of([&] { split_sequential(twice, {2, 1}); }).find("holds 3 modules but only 2 distinct ones"),
            std::string::npos);
  EXPECT_NE(error_of([] { balance_by_costs({1, 2}, 3); }).find("cannot cut 2 modules into 3 stages"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::distributed::pipeline

#endif  // KILN_WITH_GLOO
