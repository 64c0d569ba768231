// ZeroRedundancyOptimizer against single-process training: N ranks with a
// per-rank batch of B / N, at stage 1 (beside DDP) and stage 2 (instead of
// it), must take the steps one optimizer over every parameter takes with
// batch B, while each rank keeps the optimizer state (and at stage 2 the
// gradients) of its own partition only. Float64, so that 100 steps of Adam
// compare the maths rather than float32's chaos (Note [Parity and float32
// chaos] in tests/optim/lenet_parity_test.cpp). State dicts and errors are
// tested in zero_state_dict_test.cpp.
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

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "distributed/memory_report.h"
#include "optim/lr_scheduler.h"
#include "tensor/safetensors.h"
#include "zero_test_util.h"

namespace kiln::distributed::testing {
namespace {

namespace F = nn::functional;

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
        optim::AdamWOptions adamw(2e-3);
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
