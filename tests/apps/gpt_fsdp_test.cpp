// kiln-gpt train --ddp and --fsdp (Note [kiln-gpt across processes], Note
// [Trainers under FSDP]): N processes with a batch of B each train as one
// process with a batch of N x B, under DDP and under every FSDP strategy;
// an --fsdp checkpoint is the one-process format, so it resumes bit for bit
// under --fsdp, under --ddp and in one process, and kiln-gpt sample reads
// it; under kiln-run the program trains, saves and prints each rank's
// memory; the flags that exclude each other are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "apps/gpt/sampler.h"
#include "apps/gpt/trainer.h"
#include "gpt_test_data.h"
#include "kiln.h"

#ifdef KILN_WITH_GLOO
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "distributed/init.h"
#include "distributed/multi_process.h"
#include "kiln_run_process.h"
#endif

namespace kiln::apps::gpt {
namespace {

using testing::TempDir;
using testing::contains;
using testing::parse_error;

TEST(GptFsdpOptions, DdpFsdpAndTheirFlagsAreRead) {
  const CommandLine cl = parse_command_line(std::vector<std::string>{
      "kiln-gpt", "train", "--fsdp", "--fsdp-strategy", "HYBRID_SHARD", "--backend", "mpi", "--timeout", "30",
      "--heartbeat-timeout", "2.5"});
  ASSERT_TRUE(cl.train.has_value());
  EXPECT_TRUE(cl.train->fsdp);
  EXPECT_FALSE(cl.train->ddp);
  EXPECT_EQ(cl.train->fsdp_strategy, "HYBRID_SHARD");
  EXPECT_EQ(cl.train->backend, "mpi");
  EXPECT_EQ(cl.train->timeout, 30);
  EXPECT_EQ(cl.train->heartbeat_timeout, 2.5);
  const CommandLine ddp = parse_command_line(std::vector<std::string>{"kiln-gpt", "train", "--ddp"});
  ASSERT_TRUE(ddp.train.has_value());
  EXPECT_TRUE(ddp.train->ddp);
  EXPECT_EQ(ddp.train->fsdp_strategy, "full_shard");
  EXPECT_EQ(ddp.train->backend, "gloo");
}

TEST(GptFsdpOptions, FlagsThatExcludeEachOtherAreRefused) {
  EXPECT_EQ(parse_error({"train", "--ddp", "--fsdp"}),
            "--ddp and --fsdp exclude each other: DDP keeps the whole model on every process, FSDP shards it over "
            "them; give one");
  EXPECT_EQ(parse_error({"train", "--ddp", "--fsdp-strategy", "shard_grad_op"}),
            "--fsdp-strategy shard_grad_op only goes with --fsdp");
  EXPECT_EQ(parse_error({"train", "--fsdp", "--fsdp-strategy", "zero3"}),
            "--fsdp-strategy: FSDP: unknown sharding strategy 'zero3'; expected full_shard, shard_grad_op, no_shard "
            "or hybrid_shard");
  EXPECT_TRUE(contains(parse_error({"train", "--fsdp", "--amp", "--device", "cuda:0"}),
                       "--fsdp with --amp on cuda:0 is not supported"));
  EXPECT_EQ(parse_error({"train", "--fsdp", "--fsdp-cpu-offload"}),
            "--fsdp-cpu-offload only goes with --fsdp on a CUDA --device (the shards move to host memory and each "
            "unit is gathered onto the GPU), got --device cpu");
  EXPECT_EQ(parse_error({"train", "--fsdp-cpu-offload", "--device", "cuda"}),
            "--fsdp-cpu-offload only goes with --fsdp on a CUDA --device (the shards move to host memory and each "
            "unit is gathered onto the GPU), got no --fsdp and --device cuda");
  EXPECT_EQ(parse_error({"train", "--backend", "nccl"}), "--backend nccl only goes with --ddp, --fsdp or --pp");
  EXPECT_EQ(parse_error({"train", "--ddp", "--backend", "tcp"}),
            "--backend: unknown backend 'tcp' (expected gloo, mpi or nccl)");
  EXPECT_EQ(parse_error({"train", "--timeout", "5"}), "--timeout only goes with --ddp, --fsdp or --pp");
  EXPECT_EQ(parse_error({"train", "--fsdp", "--heartbeat-timeout", "-1"}),
            "--heartbeat-timeout must be a positive number of seconds up to 1e+09 (0: the default), got -1");
}

TEST(GptFsdpProgram, DdpWithFsdpExitsWithCode1SayingWhy) {
  TempDir dir("kiln-gpt-fsdp-flags");
  const testing::ProcessResult r = testing::run_kiln_gpt({"train", "--fsdp", "--ddp"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kiln-gpt: --ddp and --fsdp exclude each other", 0), 0u) << r.err;
  const testing::ProcessResult help = testing::run_kiln_gpt({"train", "--help"}, dir / "err.txt");
  for (const char* flag : {"--ddp", "--fsdp", "--fsdp-strategy", "--backend", "--timeout", "--heartbeat-timeout"}) {
    EXPECT_TRUE(contains(help.out, flag)) << flag;
  }
}

#ifdef KILN_WITH_GLOO

using distributed::testing::run_on_ranks;
using distributed::testing::test_store_dir;

struct Trained {
  TrainingResult result;
  std::string out;
};

Trained train(const TrainOptions& o, std::function<bool(int64_t)> should_stop = {}) {
  std::ostringstream out, err;
  TrainingResult r = run_training(o, {.out = &out, .err = &err, .should_stop = std::move(should_stop)});
  return {std::move(r), out.str()};
}

double max_difference(const nn::Module& a, const nn::Module& b) {
  const TensorDict pa = a.named_parameters(), pb = b.named_parameters();
  EXPECT_EQ(pa.keys(), pb.keys());
  double worst = 0;
  for (const auto& [name, t] : pa) worst = std::max(worst, max(abs(t - pb.at(name))).item<double>());
  return worst;
}

// The evaluations of two runs: the same steps, losses within `tolerance`.
void expect_same_history(const std::vector<EvalRecord>& a, const std::vector<EvalRecord>& b, double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_NEAR(a[i].train_loss, b[i].train_loss, tolerance) << "evaluation " << i;
    EXPECT_NEAR(a[i].val_loss, b[i].val_loss, tolerance) << "evaluation " << i;
  }
}

// float32, 12 steps of AdamW at lr 1e-2 with clipping: the runs sum their
// gradients in other orders (all-reduced, reduce-scattered, or in one
// process), which moves the weights by a few ulps of their updates.
constexpr double kWeightTolerance = 1e-4;
constexpr double kLossTolerance = 1e-4;

// The tiny run (gpt_test_data.h) with its text in a folder of this process.
TrainOptions tiny_run_on_ranks(int rank) {
  static const TempDir own("kiln-gpt-fsdp-rank" + std::to_string(rank));
  return testing::tiny_run(own);
}

// `world` ranks with a batch of 4 / world each, under --ddp and under
// --fsdp with `strategy`, train as one process with a batch of 4: the same
// evaluations and weights within float32 rounding. The FSDP run's
// checkpoint holds its gathered weights, and kiln-gpt sample reads it.
void expect_fsdp_run_matches_ddp_and_one_process(int world, const std::string& strategy) {
  distributed::testing::RankOptions options;
  options.deadline = std::chrono::seconds(180);
  run_on_ranks(world, [=](int rank) {
    if (strategy == "hybrid_shard") ::setenv("LOCAL_WORLD_SIZE", "2", 1);  // 2 replicas of 2 shards on 4 ranks
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", world, rank,
                                    std::chrono::seconds(30));
    TrainOptions o = tiny_run_on_ranks(rank);
    o.batch_size = 4 / world;
    o.ddp = true;
    const Trained ddp = train(o);
    o.ddp = false;
    o.fsdp = true;
    o.fsdp_strategy = strategy;
    o.save = test_store_dir() + "/fsdp.ckpt";
    const Trained fsdp = train(o);
    distributed::destroy_process_group();

    EXPECT_LE(max_difference(*fsdp.result.model, *ddp.result.model), kWeightTolerance);
    expect_same_history(fsdp.result.history, ddp.result.history, kLossTolerance);
    EXPECT_EQ(fsdp.result.step, 12);
    const std::string me = "rank " + std::to_string(rank) + " memory ";
    EXPECT_TRUE(contains(fsdp.out, me + "at the start: params ")) << fsdp.out;
    EXPECT_TRUE(contains(fsdp.out, me + "at the end: params ")) << fsdp.out;
    if (rank != 0) {
      EXPECT_FALSE(contains(fsdp.out, "train loss")) << fsdp.out;
      return;
    }
    EXPECT_TRUE(contains(fsdp.out, std::to_string(world) + " processes (gloo) of batch " + std::to_string(4 / world) +
                                       ", FSDP "))
        << fsdp.out;
    EXPECT_TRUE(contains(fsdp.out, "in 2 units")) << fsdp.out;  // the root and the one block
    EXPECT_TRUE(contains(fsdp.out, "batch 4, steps 12")) << fsdp.out;  // the recipe's global batch

    TrainOptions single = tiny_run_on_ranks(rank);
    const Trained one = train(single);
    EXPECT_LE(max_difference(*fsdp.result.model, *one.result.model), kWeightTolerance);
    expect_same_history(fsdp.result.history, one.result.history, kLossTolerance);

    // The checkpoint is the one-process format, with the gathered weights.
    const CheckpointModel saved = read_checkpoint_model(o.save);
    nn::GPT reloaded(saved.config);
    reloaded.load_state_dict(saved.weights);
    EXPECT_TRUE(testing::same_parameters(reloaded, *fsdp.result.model));
    SampleOptions sample;
    sample.checkpoint = o.save;
    sample.prompt = "the cat";
    sample.max_new_tokens = 20;
    sample.threads = 1;
    std::ostringstream printed;
    const std::vector<std::string> texts = run_sampling(sample, printed);
    ASSERT_EQ(texts.size(), 1u);
    EXPECT_EQ(texts[0].rfind("the cat", 0), 0u) << texts[0];
    EXPECT_GT(texts[0].size(), std::string("the cat").size() + 10) << texts[0];
  }, options);
}

TEST(GptTrainerFsdp, TwoRanksFullyShardedTrainAsDdpAndAsOneProcess) {
  expect_fsdp_run_matches_ddp_and_one_process(2, "full_shard");
}

TEST(GptTrainerFsdp, TwoRanksShardGradOpAndNoShardTrainAsDdp) {
  expect_fsdp_run_matches_ddp_and_one_process(2, "shard_grad_op");
  expect_fsdp_run_matches_ddp_and_one_process(2, "no_shard");
}

TEST(GptTrainerFsdp, FourRanksHybridShardTrainAsDdpAndAsOneProcess) {
  expect_fsdp_run_matches_ddp_and_one_process(4, "hybrid_shard");
}

// A text whose validation split holds 5 windows: evaluated in batches of 2
// over 2 ranks, the last batch has one row, which rank 1 evaluates while
// rank 0 runs the model on a row it does not count (under FSDP every rank
// must run it). The validation loss is still the one process's.
TEST(GptTrainerFsdp, AShortLastEvaluationBatchIsEvaluatedOnceOverTheRanks) {
  distributed::testing::RankOptions options;
  options.deadline = std::chrono::seconds(120);
  run_on_ranks(2, [](int rank) {
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank, std::chrono::seconds(30));
    TrainOptions o = tiny_run_on_ranks(rank);
    std::ofstream(o.data) << testing::small_text().substr(0, 900);  // 90 validation tokens: 5 windows of 16
    o.eval_batches = 10;
    o.batch_size = 1;
    o.fsdp = true;
    const Trained fsdp = train(o);
    distributed::destroy_process_group();
    if (rank != 0) return;
    o.fsdp = false;
    o.batch_size = 2;
    const Trained one = train(o);
    expect_same_history(fsdp.result.history, one.result.history, kLossTolerance);
    EXPECT_LE(max_difference(*fsdp.result.model, *one.result.model), kWeightTolerance);
  }, options);
}

// A 2-rank --fsdp run stopped after step 6 of 12 resumes under --fsdp bit
// for bit, and under --ddp (2 ranks) and in one process (batch 4) within
// float32 rounding of the uninterrupted run.
TEST(GptTrainerFsdp, CheckpointResumesUnderFsdpExactlyUnderDdpAndInOneProcess) {
  distributed::testing::RankOptions options;
  options.deadline = std::chrono::seconds(180);
  const std::string root = apps::testing::shared_folder("kiln-gpt-fsdp-resume");
  if (!distributed::testing::in_rank_process()) {
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
  }
  run_on_ranks(2, [&](int rank) {
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank, std::chrono::seconds(30));
    TrainOptions o = tiny_run_on_ranks(rank);
    o.batch_size = 2;
    o.fsdp = true;
    o.save = root + "/whole.ckpt";
    const Trained whole = train(o);
    o.save = root + "/part.ckpt";
    const Trained part = train(o, [](int64_t step) { return step == 6; });
    EXPECT_EQ(part.result.status, RunStatus::Interrupted);
    EXPECT_EQ(part.result.step, 6);
    o.resume = root + "/part.ckpt";
    o.save = root + "/resumed.ckpt";
    const Trained resumed = train(o);
    EXPECT_EQ(resumed.result.step, 12);
    EXPECT_EQ(max_difference(*resumed.result.model, *whole.result.model), 0.0);
    expect_same_history(resumed.result.history, whole.result.history, 0.0);
    o.fsdp = false;
    o.ddp = true;
    o.save.clear();
    const Trained under_ddp = train(o);
    distributed::destroy_process_group();
    EXPECT_LE(max_difference(*under_ddp.result.model, *whole.result.model), kWeightTolerance);
    expect_same_history(under_ddp.result.history, whole.result.history, kLossTolerance);
  }, options);
  if (distributed::testing::in_rank_process()) return;
  TempDir dir("kiln-gpt-fsdp-resume-one");
  TrainOptions one = testing::tiny_run(dir);
  one.resume = root + "/part.ckpt";
  const Trained on_one = train(one);
  EXPECT_EQ(on_one.result.step, 12);
  const CheckpointModel whole = read_checkpoint_model(root + "/whole.ckpt");
  nn::GPT reloaded(whole.config);
  reloaded.load_state_dict(whole.weights);
  EXPECT_LE(max_difference(*on_one.result.model, reloaded), kWeightTolerance);
  std::filesystem::remove_all(root);
}

// The program under kiln-run: two processes train with --fsdp, every rank
// prints its memory, rank 0 saves, and kiln-gpt sample reads the checkpoint.
TEST(GptProgramFsdp, TrainsUnderKilnRunAndSamplesItsCheckpoint) {
  TempDir dir("kiln-gpt-fsdp-kiln-run");
  const std::string text = testing::write_small_text(dir / "text.txt");
  const std::string ckpt = dir / "run.ckpt";
  const run::testing::RunResult r = run::testing::run_kiln_run(
      {"--nproc-per-node", "2", "--master-port", "0", KILN_GPT_EXE, "train", "--fsdp", "--data", text, "--layers",
       "2", "--heads", "2", "--width", "16", "--block-size", "16", "--batch-size", "2", "--steps", "6",
       "--warmup-steps", "2", "--eval-interval", "3", "--eval-batches", "2", "--threads", "1", "--save", ckpt},
      std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "FSDP FULL_SHARD in 3 units")) << r.out;
  EXPECT_TRUE(contains(r.out, "step 6/6  train loss")) << r.out;
  for (int rank : {0, 1}) {
    const std::string line = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + " memory at the end";
    EXPECT_TRUE(contains(r.out, line)) << r.out;
  }
  const testing::ProcessResult sample =
      testing::run_kiln_gpt({"sample", "--checkpoint", ckpt, "--prompt", "a dog", "--max-new-tokens", "10"},
                            dir / "err.txt");
  EXPECT_EQ(sample.exit_code, 0) << sample.err;
  EXPECT_EQ(sample.out.rfind("a dog", 0), 0u) << sample.out;
}

#endif  // KILN_WITH_GLOO

}  // namespace
}  // namespace kiln::apps::gpt
