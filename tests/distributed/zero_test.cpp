// ZeroRedundancyOptimizer against single-process training: N ranks with a
// per-rank batch of B / N, at stage 1 (beside DDP) and stage 2 (instead of
// it), must take the steps one optimizer over every parameter takes with
// batch B, while each rank keeps the optimizer state (and at stage 2 the
// gradients) of its own partition only. Float64, so that 100 steps of Adam
// compare the maths rather than float32's chaos (Note [Parity and float32
// chaos] in tests/optim/lenet_parity_test.cpp). Every rank process also
// trains the single-process reference itself.
#include <gtest/gtest.h>

#include "distributed/zero/zero_redundancy_optimizer.h"

TEST(ZeroPartition, ContiguousRunsWithTheSmallestLargestRun) {
  using kiln::distributed::zero_partition;
  EXPECT_EQ(zero_partition({4, 1, 1, 2}, 2), (std::vector<int>{0, 1, 1, 1}));
  // The bound is 3 (no cut does better); each run is filled up to it,
  // leaving one parameter for each later run.
  EXPECT_EQ(zero_partition({1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 4), (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3}));
  // One large parameter: it is a run of its own, and no run stays empty.
  EXPECT_EQ(zero_partition({10, 48000, 120, 10080, 84}, 4), (std::vector<int>{0, 1, 2, 2, 3}));
  EXPECT_EQ(zero_partition({5, 5, 5}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(zero_partition({7}, 1), (std::vector<int>{0}));
  try {
    zero_partition({1, 2}, 3);
    ADD_FAILURE() << "no error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 parameters cannot be shared by 3 ranks"), std::string::npos) << e.what();
  }
}

#ifdef KILN_WITH_GLOO

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/memory_report.h"
#include "multi_process.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "store_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/parallel.h"
#include "tensor/random.h"
#include "tensor/safetensors.h"
#include "training_test_util.h"

namespace kiln::distributed::testing {
namespace {

namespace F = nn::functional;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout(30000);
constexpr int64_t kBatch = 12;  // divisible by 2, 3 and 4 ranks

// This rank's gloo group; the rank computes on one thread, as up to 4 ranks
// share CI's 2 cores (OpenMP threads spinning against each other's
// processes would make the test several times slower).
std::shared_ptr<ProcessGroup> rank_group() {
  set_num_threads(1);
  return make_test_group("gloo", kTimeout);
}

// Rows [rank * n / world, (rank + 1) * n / world) of `t`.
Tensor shard(const Tensor& t, int rank, int world) {
  const int64_t n = t.shape()[0];
  const int64_t begin = rank * n / world, end = (rank + 1) * n / world;
  return t.narrow(0, begin, end - begin);
}

RankOptions slow_ranks() {
  RankOptions options;
  options.deadline = std::chrono::seconds(300);
  return options;
}

// The two models the issue names: float64 LeNet (62k parameters, one of
// them 78% of the model) and a wide MLP of evenly sized layers.
enum class Model { LeNet, WideMlp };
const char* model_name(Model m) { return m == Model::LeNet ? "LeNet" : "wide MLP"; }

std::shared_ptr<nn::Module> make_model(Model m, uint64_t seed) {
  if (m == Model::LeNet) return make_lenet(seed);
  manual_seed(seed);
  auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 256), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(256, 10));
  mlp->to(DType::Float64);
  return mlp;
}

// Step `step`'s whole batch, the same in every process.
std::pair<Tensor, Tensor> batch(Model m, int step) {
  if (m == Model::LeNet) return batch_for(step, kBatch);
  Generator gen;
  gen.manual_seed(2000 + static_cast<uint64_t>(step));
  Tensor x = randn({kBatch, 16}, DType::Float64, &gen);
  Tensor y = randint(0, 10, {kBatch}, DType::Int64, &gen);
  return {x, y};
}

optim::AdamOptions adam() {
  optim::AdamOptions o;
  o.lr = 1e-3;
  return o;
}

optim::SGDOptions sgd_momentum() {
  optim::SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  return o;
}

// What the loops below may do beside forward, backward and step.
struct Loop {
  int steps = 100;
  int micro_batches = 1;                 // gradient accumulation: the loss of each divided by their number
  double clip = 0.0;                     // clip the gradient norm to this, when positive
  std::vector<double>* norms = nullptr;  // the norms clipping saw, one per step
};

// One optimizer over every parameter, one process, the whole batch.
std::shared_ptr<nn::Module> train_single(Model m, const OptimizerFactory& make_optimizer, const Loop& loop) {
  auto model = make_model(m, 7);
  auto opt = make_optimizer({{model->parameters(), {}}});
  for (int s = 0; s < loop.steps; ++s) {
    auto [x, y] = batch(m, s);
    opt->zero_grad();
    for (int k = 0; k < loop.micro_batches; ++k) {
      (F::cross_entropy(model->forward(shard(x, k, loop.micro_batches)), shard(y, k, loop.micro_batches)) /
       loop.micro_batches)
          .backward();
    }
    if (loop.clip > 0) loop.norms->push_back(optim::clip_grad_norm_(model->parameters(), loop.clip));
    opt->step();
  }
  return model;
}

// A file the test process and its rank processes all reach: named after
// the test process, which is the ranks' parent.
std::string test_process_file(const std::string& name) {
  const pid_t test_process = in_rank_process() ? getppid() : getpid();
  return "/tmp/kiln_zero_test_" + std::to_string(test_process) + "_" + name + ".safetensors";
}

// The single-process reference of 100 Adam steps, trained once by the test
// process (not once per rank) and read by its ranks from a file, which the
// test process removes when it exits.
struct ReferenceFiles {
  ~ReferenceFiles() {
    if (in_rank_process()) return;
    for (Model m : {Model::LeNet, Model::WideMlp}) std::remove(path(m).c_str());
  }
  static std::string path(Model m) { return test_process_file(m == Model::LeNet ? "lenet" : "mlp"); }
};

std::shared_ptr<nn::Module> adam_reference(Model m) {
  static ReferenceFiles files;
  const std::string path = ReferenceFiles::path(m);
  if (!in_rank_process() && !std::filesystem::exists(path)) {
    save_safetensors(path, train_single(m, optimizer_factory<optim::Adam>(adam()), Loop{})->state_dict());
  }
  auto model = make_model(m, 0);
  model->load_state_dict(load_safetensors(path));
  return model;
}

// ZeRO at `stage` over `group`: stage 1 beside DDP, stage 2 alone. Each rank
// starts from other weights, and takes rank 0's.
struct ZeroRun {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<ZeroRedundancyOptimizer> opt;
};

ZeroRun make_zero(Model m, int stage, const OptimizerFactory& make_optimizer, std::shared_ptr<ProcessGroup> group) {
  ZeroRun run;
  run.model = make_model(m, 7 + static_cast<uint64_t>(group->rank()));
  if (stage == 1) {
    DDPOptions ddp;
    ddp.group = group;
    run.ddp = std::make_shared<DistributedDataParallel>(run.model, ddp);
  }
  ZeroOptions options;
  options.group = group;
  options.stage = stage;
  options.bucket_cap_bytes = 256 << 10;  // a few buckets per rank
  run.opt = std::make_unique<ZeroRedundancyOptimizer>(run.model->parameters(), make_optimizer, options);
  return run;
}

void train_zero(Model m, ZeroRun& run, const Loop& loop, int from_step = 0) {
  const int rank = run.opt->group().rank(), world = run.opt->group().size();
  nn::Module& net = run.ddp ? static_cast<nn::Module&>(*run.ddp) : *run.model;
  for (int s = from_step; s < from_step + loop.steps; ++s) {
    auto [x, y] = batch(m, s);
    Tensor xr = shard(x, rank, world), yr = shard(y, rank, world);
    run.opt->zero_grad();
    for (int k = 0; k < loop.micro_batches; ++k) {
      (F::cross_entropy(net.forward(shard(xr, k, loop.micro_batches)), shard(yr, k, loop.micro_batches)) /
       loop.micro_batches)
          .backward();
    }
    if (loop.clip > 0) loop.norms->push_back(run.opt->clip_grad_norm_(loop.clip));
    run.opt->step();
  }
}

// max |a - b| over every parameter, relative to max |b|.
double relative_difference(const nn::Module& a, const nn::Module& b) {
  double largest = 0;
  for (const Tensor& p : b.parameters()) largest = std::max(largest, max(abs(p)).item<double>());
  return max_difference(a, b) / largest;
}

// Elements of per-element optimizer state (tensors of more than one
// element, or of the parameter's shape) this rank's optimizer holds.
int64_t state_elements(const ZeroRedundancyOptimizer& zero) {
  const optim::Optimizer& local = zero.local_optimizer();
  int64_t n = 0;
  for (size_t g = 0; g < local.num_param_groups(); ++g) {
    for (const Tensor& p : local.params(g)) {
      for (const auto& [name, t] : local.state(p)) {
        if (t.shape() == p.shape()) n += t.numel();
      }
    }
  }
  return n;
}

// The parity test of the issue: stage 1 and stage 2, LeNet and the wide MLP,
// 100 Adam steps each, against one process.
void expect_zero_matches_single_process(int world) {
  if (!in_rank_process()) {
    adam_reference(Model::LeNet);
    adam_reference(Model::WideMlp);
  }
  run_on_ranks(
      world,
      [=](int rank) {
        auto group = rank_group();
        const OptimizerFactory factory = optimizer_factory<optim::Adam>(adam());
        for (Model m : {Model::LeNet, Model::WideMlp}) {
          auto reference = adam_reference(m);
          int64_t total = 0;
          for (const Tensor& p : reference->parameters()) total += p.numel();
          for (int stage : {1, 2}) {
            ZeroRun run = make_zero(m, stage, factory, group);
            train_zero(m, run, Loop{});
            const double difference = relative_difference(*run.model, *reference);
            std::printf("%s, stage %d, rank %d of %d: max |ZeRO - single process| / max |p| after 100 steps: %.3g\n",
                        model_name(m), stage, rank, world, difference);
            EXPECT_LE(difference, 1e-10) << model_name(m) << " at stage " << stage;

            // The state is sharded: this rank's optimizer holds exp_avg and
            // exp_avg_sq of its partition and of nothing else.
            const std::vector<int64_t> numels = run.opt->partition_numels();
            int64_t sum = 0;
            for (int64_t n : numels) {
              EXPECT_GT(n, 0);
              sum += n;
            }
            EXPECT_EQ(sum, total);
            EXPECT_EQ(state_elements(*run.opt), 2 * numels[static_cast<size_t>(rank)]);
            // Stage 2 keeps the averaged gradients of the partition only.
            if (stage == 2) {
              const auto params = run.model->parameters();
              for (size_t i = 0; i < params.size(); ++i) {
                EXPECT_EQ(params[i].grad().defined(), run.opt->owners()[i] == rank) << "parameter " << i;
              }
            }
          }
        }
      },
      slow_ranks());
}

TEST(ZeroRedundancyOptimizer, TwoRanksTrainLeNetAndAWideMlpAsOneProcessAtStages1And2) {
  expect_zero_matches_single_process(2);
}

TEST(ZeroRedundancyOptimizer, ThreeRanksTrainLeNetAndAWideMlpAsOneProcessAtStages1And2) {
  expect_zero_matches_single_process(3);
}

TEST(ZeroRedundancyOptimizer, FourRanksTrainLeNetAndAWideMlpAsOneProcessAtStages1And2) {
  expect_zero_matches_single_process(4);
}

TEST(ZeroRedundancyOptimizer, SgdWithMomentumAndGlobalNormClippingTrainAsOneProcess) {
  // Clipping to 0.1 clips most steps, so a wrong global norm would show in
  // both the norms and the weights.
  run_on_ranks(
      3,
      [](int rank) {
        auto group = rank_group();
        const OptimizerFactory factory = optimizer_factory<optim::SGD>(sgd_momentum());
        std::vector<double> reference_norms;
        Loop loop;
        loop.steps = 60;
        loop.clip = 0.1;
        loop.norms = &reference_norms;
        auto reference = train_single(Model::WideMlp, factory, loop);
        for (int stage : {1, 2}) {
          std::vector<double> norms;
          loop.norms = &norms;
          ZeroRun run = make_zero(Model::WideMlp, stage, factory, group);
          train_zero(Model::WideMlp, run, loop);
          ASSERT_EQ(norms.size(), reference_norms.size());
          int clipped = 0;
          for (size_t s = 0; s < norms.size(); ++s) {
            EXPECT_NEAR(norms[s], reference_norms[s], 1e-12 * reference_norms[s]) << "step " << s;
            clipped += norms[s] > loop.clip;
          }
          EXPECT_GE(clipped, loop.steps / 2) << "clipping changed too few steps to be tested";
          const double difference = relative_difference(*run.model, *reference);
          std::printf("SGD, stage %d, rank %d: relative difference %.3g\n", stage, rank, difference);
          EXPECT_LE(difference, 1e-10) << "stage " << stage;
          // SGD's state is its momentum buffers, of the partition only.
          EXPECT_EQ(state_elements(*run.opt), run.opt->partition_numels()[static_cast<size_t>(rank)]);
        }
      },
      slow_ranks());
}

TEST(ZeroRedundancyOptimizer, ParamGroupsSchedulersAndAccumulationWorkAsInOneProcess) {
  // AdamW over nanoGPT's two groups (decay on matrices, none on biases), a
  // cosine schedule attached to the local optimizer, and at stage 2 two
  // micro-batches per step, each reduced and added up by the owner.
  run_on_ranks(
      2,
      [](int rank) {
        auto group = rank_group();
        optim::AdamWOptions adamw;
        adamw.lr = 2e-3;
        const OptimizerFactory factory = optimizer_factory<optim::AdamW>(adamw);
        constexpr int kSteps = 30;

        auto reference = make_model(Model::WideMlp, 7);
        optim::AdamW ref_opt(optim::weight_decay_groups(reference->parameters(), 0.1), adamw);
        optim::CosineAnnealingLR ref_schedule(ref_opt, kSteps);
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = batch(Model::WideMlp, s);
          ref_opt.zero_grad();
          F::cross_entropy(reference->forward(x), y).backward();
          ref_opt.step();
          ref_schedule.step();
        }

        for (int stage : {1, 2}) {
          auto model = make_model(Model::WideMlp, 7 + static_cast<uint64_t>(rank));
          std::shared_ptr<DistributedDataParallel> ddp;
          if (stage == 1) {
            DDPOptions ddp_options;
            ddp_options.group = group;
            ddp = std::make_shared<DistributedDataParallel>(model, ddp_options);
          }
          ZeroOptions options;
          options.group = group;
          options.stage = stage;
          ZeroRedundancyOptimizer opt(optim::weight_decay_groups(model->parameters(), 0.1), factory, options);
          ASSERT_EQ(opt.num_param_groups(), 2u);
          EXPECT_EQ(opt.local_optimizer().hyperparameter(0, "weight_decay"), 0.1);
          EXPECT_EQ(opt.local_optimizer().hyperparameter(1, "weight_decay"), 0.0);
          optim::CosineAnnealingLR schedule(opt.local_optimizer(), kSteps);
          nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;
          const int micro = stage == 2 ? 2 : 1;
          for (int s = 0; s < kSteps; ++s) {
            auto [x, y] = batch(Model::WideMlp, s);
            Tensor xr = shard(x, rank, 2), yr = shard(y, rank, 2);
            opt.zero_grad();
            for (int k = 0; k < micro; ++k) {
              (F::cross_entropy(net.forward(shard(xr, k, micro)), shard(yr, k, micro)) / micro).backward();
            }
            opt.step();
            schedule.step();
          }
          EXPECT_EQ(opt.lr(0), ref_opt.lr(0));
          EXPECT_EQ(opt.lr(1), ref_opt.lr(1));
          const double difference = relative_difference(*model, *reference);
          std::printf("AdamW groups, stage %d, rank %d: relative difference %.3g\n", stage, rank, difference);
          EXPECT_LE(difference, 1e-10) << "stage " << stage;
        }
      },
      slow_ranks());
}

bool same_dicts(const TensorDict& a, const TensorDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [key, t] : a) {
    if (!equal(t.cpu().to(DType::Float64), b.at(key).cpu().to(DType::Float64))) return false;
  }
  return true;
}

TEST(ZeroRedundancyOptimizer, ConsolidatedStateDictsLoadOnAnyNumberOfRanksAndInOneProcess) {
  // 3 ranks train 10 steps at stage 2 and consolidate; the dict is a whole
  // Adam's (one process loads it and matches its own training); 3 fresh
  // ranks load it bit for bit, and 2 ranks load it from a file and go on
  // training as the 3 do.
  const std::string path = test_process_file("checkpoint");
  const Model m = Model::LeNet;
  const OptimizerFactory factory = optimizer_factory<optim::Adam>(adam());
  run_on_ranks(
      3,
      [&](int rank) {
        auto group = rank_group();
        ZeroRun run = make_zero(m, 2, factory, group);
        train_zero(m, run, Loop{.steps = 10});

        // Consolidated to every rank in turn: each then has the whole dict.
        TensorDict whole;
        for (int to = 0; to < 3; ++to) {
          run.opt->consolidate_state_dict(to);
          if (to == rank) whole = run.opt->state_dict();
        }
        run.opt->consolidate_state_dict(0);
        if (rank != 0) {
          const std::string elsewhere = error_of([&] { (void)run.opt->state_dict(); });
          EXPECT_NE(
              elsewhere.find("the state dict was consolidated to rank 0, not to this rank " + std::to_string(rank)),
              std::string::npos)
              << elsewhere;
        }

        // It is one Adam's over every parameter, within rounding of one
        // process's own.
        auto single_model = make_model(m, 7);
        auto single = factory({{single_model->parameters(), {}}});
        for (int s = 0; s < 10; ++s) {
          auto [x, y] = batch(m, s);
          single->zero_grad();
          F::cross_entropy(single_model->forward(x), y).backward();
          single->step();
        }
        const TensorDict expected = single->state_dict();
        ASSERT_EQ(whole.keys(), expected.keys());
        for (const auto& [key, t] : expected) {
          const Tensor got = whole.at(key).cpu();
          ASSERT_EQ(got.shape(), t.shape()) << key;
          const double scale = std::max(1e-300, max(abs(t)).item<double>());
          EXPECT_LE(max(abs(sub(got, t))).item<double>() / scale, 1e-10) << key;
        }
        single->load_state_dict(whole);
        EXPECT_TRUE(same_dicts(single->state_dict(), whole));

        // Three fresh ranks, with another lr, load it and hold the same.
        optim::AdamOptions other = adam();
        other.lr = 0.5;
        ZeroRun fresh = make_zero(m, 2, optimizer_factory<optim::Adam>(other), group);
        fresh.opt->load_state_dict(whole);
        EXPECT_EQ(fresh.opt->lr(0), adam().lr);
        EXPECT_TRUE(same_dicts(fresh.opt->local_optimizer().state_dict(), run.opt->local_optimizer().state_dict()));
        if (rank == 0) {
          save_safetensors(path, whole);
          save_safetensors(path + ".model10", run.model->state_dict());
        }

        // The run goes on for 5 more steps, which the 2 ranks below repeat.
        train_zero(m, run, Loop{.steps = 5}, 10);
        if (rank == 0) save_safetensors(path + ".model15", run.model->state_dict());
      },
      slow_ranks());
  run_on_ranks(
      2,
      [&](int rank) {
        auto group = rank_group();
        ZeroRun run = make_zero(m, 1, factory, group);  // stage 1 now, beside DDP
        run.model->load_state_dict(load_safetensors(path + ".model10"));
        run.opt->load_state_dict(load_safetensors(path));
        train_zero(m, run, Loop{.steps = 5}, 10);
        auto three_ranks = make_model(m, 0);
        three_ranks->load_state_dict(load_safetensors(path + ".model15"));
        const double difference = relative_difference(*run.model, *three_ranks);
        std::printf("rank %d: resumed on 2 ranks from 3, 5 steps later: relative difference %.3g\n", rank, difference);
        EXPECT_LE(difference, 1e-10);
      },
      slow_ranks());
  // Only the test process: each rank process also runs the rest of the
  // body once its own run_on_ranks() call has returned.
  if (!in_rank_process()) {
    for (const char* suffix : {"", ".model10", ".model15"}) std::remove((path + suffix).c_str());
  }
}

TEST(ZeroRedundancyOptimizer, BadInputIsNamed) {
  run_on_ranks(2, [](int rank) {
    auto group = rank_group();
    const OptimizerFactory factory = optimizer_factory<optim::Adam>(adam());
    ZeroOptions options;
    options.group = group;
    auto linear = std::make_shared<nn::Linear>(4, 3);

    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer(std::vector<Tensor>{}, factory, options);
              }).find("ZeroRedundancyOptimizer: got an empty parameter list"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer({linear->weight, linear->weight}, factory, options);
              }).find("parameter 1 (group 0) is listed twice"),
              std::string::npos);
    ZeroOptions stage3 = options;
    stage3.stage = 3;
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer(linear->parameters(), factory, stage3);
              }).find("stage must be 1 or 2, got 3"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer({linear->weight}, factory, options);
              }).find("1 parameters cannot be shared by 2 ranks"),
              std::string::npos);

    // A rank with another model is named, with the parameter, on every rank.
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3),
                                                  std::make_shared<nn::Linear>(3, rank == 0 ? 2 : 5));
    const std::string differs = error_of([&] { ZeroRedundancyOptimizer(model->parameters(), factory, options); });
    EXPECT_NE(differs.find("ZeroRedundancyOptimizer: parameter 2 ('group 0 #2') is float32 [" +
                           std::string(rank == 0 ? "2, 3] on rank 0 but float32 [5, 3] on rank 1"
                                                 : "5, 3] on rank 1 but float32 [2, 3] on rank 0")),
              std::string::npos)
        << differs;

    // A factory that ignores the groups it is given.
    OptimizerFactory wrong = [&](const std::vector<optim::ParamGroup>&) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::Adam>(linear->parameters(), adam());
    };
    EXPECT_NE(error_of([&] {
                ZeroRedundancyOptimizer(linear->parameters(), wrong, options);
              }).find("holds other parameters than it was given"),
              std::string::npos);

    // Stage 2 names the parameters a backward did not reach.
    manual_seed(1);
    auto branchy = std::make_shared<Branchy>();
    branchy->use_second = false;
    ZeroOptions stage2 = options;
    stage2.stage = 2;
    ZeroRedundancyOptimizer opt(branchy->parameters(), factory, stage2);
    const std::string missing = error_of([&] { sum(branchy->forward(ones({2, 4}, DType::Float64))).backward(); });
    EXPECT_NE(missing.find("these parameters got no gradient in this backward: parameter 2 (group 0, float64 [3, 3]), "
                           "parameter 3 (group 0, float64 [3])"),
              std::string::npos)
        << missing;
    branchy->use_second = true;
    sum(branchy->forward(ones({2, 4}, DType::Float64))).backward();  // works again
    opt.step();

    // State dicts: before consolidating, and a part one rank refuses.
    EXPECT_NE(
        error_of([&] { (void)opt.state_dict(); }).find("call consolidate_state_dict(to_rank) on every rank first"),
        std::string::npos);
    opt.consolidate_state_dict(0);
    TensorDict whole;
    if (rank == 0) whole = opt.state_dict();
    // Rank 1 consolidates to itself too, to have the dict.
    opt.consolidate_state_dict(1);
    if (rank == 1) whole = opt.state_dict();
    const TensorDict before = opt.local_optimizer().state_dict();
    TensorDict bad;
    for (const auto& [key, t] : whole) bad.insert(key, key == "state.0.exp_avg" ? zeros({5}, DType::Float64) : t);
    const std::string refused = error_of([&] { opt.load_state_dict(bad); });
    if (opt.owners()[0] == rank) {
      EXPECT_NE(refused.find("'state.0.exp_avg' has shape [5] but parameter 0 has shape [3, 4]"), std::string::npos)
          << refused;
    } else {
      EXPECT_NE(refused.find("rank(s) " + std::to_string(opt.owners()[0]) + " could not load their part"),
                std::string::npos)
          << refused;
    }
    EXPECT_TRUE(same_dicts(opt.local_optimizer().state_dict(), before));
    EXPECT_NE(error_of([&] { opt.load_state_dict(TensorDict{}); }).find("the state dict has 0 param groups"),
              std::string::npos);
  });
}

TEST(ZeroRedundancyOptimizer, MemoryReportShowsTheShardedStateAndGradients) {
  // The wide MLP (in float64, 8 bytes an element) on 2 ranks: at stage 1 each
  // rank holds every gradient (DDP's buckets) and its partition's Adam
  // state; at stage 2 its partition's gradients too.
  run_on_ranks(2, [](int rank) {
    auto group = rank_group();
    const OptimizerFactory factory = optimizer_factory<optim::Adam>(adam());
    for (int stage : {1, 2}) {
      ZeroRun run = make_zero(Model::WideMlp, stage, factory, group);
      train_zero(Model::WideMlp, run, Loop{.steps = 1});
      int64_t total = 0;
      for (const Tensor& p : run.model->parameters()) total += p.numel();
      const int64_t mine = run.opt->partition_numels()[static_cast<size_t>(rank)];
      int64_t owned_params = 0;
      for (int owner : run.opt->owners()) owned_params += owner == rank;
      // At stage 1 through the DDP wrapper, whose parameters are the model's.
      const nn::Module& module = run.ddp ? static_cast<const nn::Module&>(*run.ddp) : *run.model;
      const MemoryReport report = memory_report(module, *run.opt);
      std::printf("stage %d, rank %d: %s\n", stage, rank, report.str().c_str());
      EXPECT_EQ(report.parameter_bytes, static_cast<size_t>(8 * total));
      EXPECT_EQ(report.gradient_bytes, static_cast<size_t>(8 * (stage == 1 ? total : mine)));
      // exp_avg and exp_avg_sq per element, and a float64 step per parameter.
      EXPECT_EQ(report.optimizer_state_bytes, static_cast<size_t>(16 * mine + 8 * owned_params));
      EXPECT_GE(report.allocated_bytes, report.parameter_bytes + report.gradient_bytes + report.optimizer_state_bytes);
      EXPECT_GE(report.peak_allocated_bytes, report.allocated_bytes);
    }
  });
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
