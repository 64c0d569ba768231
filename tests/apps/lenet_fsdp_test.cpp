// kiln-lenet --fsdp (Note [Trainers under FSDP]): two processes sharding
// LeNet train as two processes under --ddp do, with every strategy and with
// gradient accumulation; an --fsdp checkpoint is the one-process format, so
// it resumes under --fsdp bit for bit and in one process; the test pass runs
// the model as often on every rank; the flags that exclude --fsdp are
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "apps/lenet/data_parallel.h"
#include "apps/lenet/data_source.h"
#include "apps/lenet/evaluate.h"
#include "apps/lenet/trainer.h"
#include "lenet_test_data.h"

#ifdef KILN_WITH_GLOO
#include <chrono>
#include <filesystem>

#include "distributed/file_store.h"
#include "distributed/init.h"
#include "distributed/multi_process.h"
#include "lenet_distributed_test_data.h"
#endif

namespace kiln::apps::lenet::testing {
namespace {

TEST(LenetFsdpOptions, FsdpAndItsStrategyAreRead) {
  const CommandLine cl =
      parse_command_line(std::vector<std::string>{"kiln-lenet", "--fsdp", "--fsdp-strategy", "shard-grad-op",
                                                  "--timeout", "30", "--backend", "gloo"});
  ASSERT_TRUE(cl.options.has_value());
  EXPECT_TRUE(cl.options->fsdp);
  EXPECT_FALSE(cl.options->ddp);
  EXPECT_EQ(cl.options->fsdp_strategy, "shard-grad-op");
  EXPECT_EQ(cl.options->timeout, 30);
  EXPECT_EQ(parse_command_line(std::vector<std::string>{"kiln-lenet"}).options->fsdp_strategy, "full_shard");
}

TEST(LenetFsdpOptions, FlagsThatExcludeFsdpAreRefused) {
  EXPECT_EQ(parse_error({"--ddp", "--fsdp"}),
            "--ddp and --fsdp exclude each other: DDP keeps the whole model on every process, FSDP shards it over "
            "them; give one");
  EXPECT_EQ(parse_error({"--fsdp", "--dp"}),
            "--fsdp and --dp exclude each other: --fsdp shards the model over processes, --dp replicates it in one "
            "process");
  EXPECT_EQ(parse_error({"--fsdp", "--eval-only", "--weights", "w.safetensors"}),
            "--eval-only runs in one process; drop --fsdp");
  EXPECT_EQ(parse_error({"--fsdp-strategy", "no_shard"}), "--fsdp-strategy no_shard only goes with --fsdp");
  EXPECT_EQ(parse_error({"--fsdp", "--fsdp-strategy", "half_shard"}),
            "--fsdp-strategy: FSDP: unknown sharding strategy 'half_shard'; expected full_shard, shard_grad_op, "
            "no_shard or hybrid_shard");
  EXPECT_TRUE(contains(parse_error({"--fsdp", "--amp", "--device", "cuda"}),
                       "--fsdp with --amp on cuda is not supported"))
      << parse_error({"--fsdp", "--amp", "--device", "cuda"});
  EXPECT_EQ(parse_error({"--fsdp", "--amp"}), "");  // bfloat16 on the CPU needs no loss scaling
  EXPECT_EQ(parse_error({"--heartbeat-timeout", "5"}), "--heartbeat-timeout only goes with --ddp, --fsdp or --pp");
  EXPECT_EQ(parse_error({"--backend", "mpi"}), "--backend mpi only goes with --ddp, --fsdp or --pp");
}

TEST(LenetFsdpProgram, DdpWithFsdpExitsWithCode1SayingWhy) {
  TempDir dir("kiln-lenet-fsdp-flags");
  const ProcessResult r = run_kiln_lenet({"--ddp", "--fsdp"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "kiln-lenet: --ddp and --fsdp exclude each other")) << r.err;
  const ProcessResult help = run_kiln_lenet({"--help"}, dir / "err.txt");
  EXPECT_TRUE(contains(help.out, "--fsdp-strategy")) << help.out;
}

// The largest share of n test images over N ranks, in batches of b.
TEST(LenetFsdpEvaluation, EveryRankRunsTheBatchesOfTheLargestShare) {
  auto batches = [](int world, int64_t n, int64_t b) {
    return test_batches_per_rank({.group = nullptr, .rank = 1, .world_size = world}, n, b);
  };
  EXPECT_EQ(batches(2, 100, 256), 1);
  EXPECT_EQ(batches(2, 513, 256), 2);  // rank 0 has 257 images, rank 1 256
  EXPECT_EQ(batches(2, 512, 256), 1);
  EXPECT_EQ(batches(3, 10, 3), 2);  // shares of 4, 3, 3
  EXPECT_EQ(batches(4, 3, 256), 1);  // rank 3 has none, and still runs one batch
}

// A module that counts its forward calls and answers 10 logits per image.
class CountingModel : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    ++calls;
    return zeros({x.size(0), 10});
  }
  int calls = 0;
};

TEST(LenetFsdpEvaluation, MissingBatchesRunTheModelOnABlankImageAndCountNothing) {
  TempDir dir("kiln-lenet-fsdp-eval");
  write_synthetic_cifar(dir.path());
  const Datasets data = open_datasets(dir.path().string(), false, 0);
  data::DataLoaderOptions options;
  options.batch_size = 64;
  data::DataLoader loader(data.test, options);  // 100 images: 2 batches
  CountingModel model;
  const Evaluation plain = evaluate(model, loader, kCPU, 10);
  EXPECT_EQ(model.calls, 2);
  const Evaluation padded = evaluate(model, loader, kCPU, 10, 5);
  EXPECT_EQ(model.calls, 2 + 5);
  EXPECT_EQ(padded.images, 100);
  EXPECT_EQ(padded.total, plain.total);
  EXPECT_EQ(padded.loss, plain.loss);  // ln 10 for every image, the blank ones not counted
  EXPECT_NEAR(padded.loss, std::log(10.0), 1e-6);
  EXPECT_TRUE(model.is_training());
}

#ifdef KILN_WITH_GLOO

using distributed::testing::run_on_ranks;
using distributed::testing::test_store_dir;

// Two epochs on two ranks with `per_rank` x accum_steps images per rank and
// step, under --ddp and under --fsdp with `strategy`: the same losses,
// accuracy and weights within float32 rounding (the gradients are summed in
// other orders: all-reduced, or reduce-scattered).
void expect_fsdp_run_matches_ddp(int64_t per_rank, int64_t accum_steps, const std::string& strategy) {
  distributed::testing::RankOptions options;
  options.deadline = std::chrono::seconds(120);
  run_on_ranks(2, [=](int rank) {
    const std::string data = shared_data(rank);
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank,
                                    std::chrono::seconds(20));
    TrainerOptions o;
    o.data = data;
    o.epochs = 2;
    o.threads = 1;
    o.batch_size = per_rank;
    o.accum_steps = accum_steps;
    o.ddp = true;
    const Trained ddp = train(o);
    o.ddp = false;
    o.fsdp = true;
    o.fsdp_strategy = strategy;
    o.log = test_store_dir() + "/fsdp.jsonl";
    const Trained fsdp = train(o);
    distributed::destroy_process_group();

    EXPECT_LE(max_difference(*fsdp.result.model, *ddp.result.model), 2e-5);
    ASSERT_EQ(fsdp.result.history.size(), 2u);
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(fsdp.result.history[e].train_loss, ddp.result.history[e].train_loss, 1e-4);
      EXPECT_NEAR(fsdp.result.history[e].test_loss, ddp.result.history[e].test_loss, 1e-4);
      EXPECT_EQ(fsdp.result.history[e].test_accuracy, ddp.result.history[e].test_accuracy);
    }
    EXPECT_EQ(fsdp.result.evaluation.images, 100);  // every test image once, over both ranks
    EXPECT_EQ(fsdp.result.global_step, ddp.result.global_step);
    // Every rank prints what it holds; rank 0 alone the header and the log.
    const std::string me = "rank " + std::to_string(rank) + " memory ";
    EXPECT_TRUE(contains(fsdp.out, me + "at the start: params ")) << fsdp.out;
    EXPECT_TRUE(contains(fsdp.out, me + "at the end: params ")) << fsdp.out;
    EXPECT_TRUE(contains(ddp.out, me + "at the end: params ")) << ddp.out;
    if (rank == 0) {
      EXPECT_TRUE(contains(fsdp.out, "2 processes (gloo), global batch " + std::to_string(2 * per_rank) + ", FSDP "))
          << fsdp.out;
      EXPECT_TRUE(contains(fsdp.out, " in 3 units")) << fsdp.out;  // root, fc1, fc2
      EXPECT_EQ(read_lines(o.log).size(), 2u);
    } else {
      EXPECT_FALSE(contains(fsdp.out, "epoch 1/2")) << fsdp.out;
    }
  }, options);
}

TEST(LenetTrainerFsdp, TwoRanksFullyShardedTrainAsUnderDdp) { expect_fsdp_run_matches_ddp(10, 1, "full_shard"); }

TEST(LenetTrainerFsdp, TwoRanksAccumulatingUnderShardGradOpTrainAsUnderDdp) {
  expect_fsdp_run_matches_ddp(5, 2, "shard_grad_op");
}

TEST(LenetTrainerFsdp, NoShardTrainsAsDdp) { expect_fsdp_run_matches_ddp(10, 1, "no_shard"); }

// A 2-rank --fsdp run of 50 steps (global batch 4) stopped at step 32 (the
// ranks agree to stop every kStopCheckSteps) and resumed under --fsdp ends
// bit for bit where the uninterrupted one does, and its checkpoint (the
// one-process format, gathered on rank 0) holds the gathered weights and
// momentum; resumed in one process with the global batch, it ends within
// float32 rounding of them.
TEST(LenetTrainerFsdp, CheckpointResumesUnderFsdpExactlyAndInOneProcess) {
  distributed::testing::RankOptions options;
  options.deadline = std::chrono::seconds(120);
  const std::string root = apps::testing::shared_folder("kiln-lenet-fsdp-resume");
  if (!distributed::testing::in_rank_process()) {
    std::filesystem::remove_all(root);
    write_synthetic_cifar(root);
  }
  auto run_options = [&] {
    TrainerOptions o;
    o.data = root;
    o.epochs = 1;
    o.threads = 1;
    o.batch_size = 2;
    o.fsdp = true;
    return o;
  };
  run_on_ranks(2, [&](int rank) {
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank, std::chrono::seconds(20));
    TrainerOptions o = run_options();
    o.save = root + "/whole.ckpt";
    const Trained whole = train(o);
    o.save = root + "/part.ckpt";
    const Trained part = train(o, [](int64_t step) { return step >= 20; });
    EXPECT_EQ(part.result.status, RunStatus::Interrupted);
    EXPECT_EQ(part.result.global_step, 32);
    o.resume = root + "/part.ckpt";
    const Trained resumed = train(o);
    distributed::destroy_process_group();
    EXPECT_EQ(resumed.result.global_step, 50);
    EXPECT_EQ(max_difference(*resumed.result.model, *whole.result.model), 0.0);
    ASSERT_EQ(resumed.result.history.size(), 1u);
    // The interrupted epoch's loss sums were summed over the ranks when saved.
    EXPECT_NEAR(resumed.result.history[0].train_loss, whole.result.history[0].train_loss, 1e-6);
    EXPECT_EQ(resumed.result.history[0].test_loss, whole.result.history[0].test_loss);
    if (rank == 0) {
      const Checkpointed saved(root + "/whole.ckpt");
      EXPECT_EQ(max_difference(saved.model, *whole.result.model), 0.0);
      // SGD's momentum for every parameter, in the parameters' full shapes.
      EXPECT_EQ(saved.tensors.at("optimizer.state.4.momentum_buffer").shape(), (Shape{120, 400}));
      EXPECT_EQ(saved.tensors.at("optimizer.state.5.momentum_buffer").shape(), (Shape{120}));
    }
  }, options);
  if (distributed::testing::in_rank_process()) return;
  TrainerOptions one = run_options();
  one.fsdp = false;
  one.batch_size = 4;
  one.resume = root + "/part.ckpt";
  const Trained on_one = train(one);
  const Checkpointed whole(root + "/whole.ckpt");
  EXPECT_EQ(on_one.result.global_step, 50);
  EXPECT_LE(max_difference(*on_one.result.model, whole.model), 2e-5);
  ASSERT_EQ(on_one.result.history.size(), 1u);
  EXPECT_NEAR(on_one.result.history[0].test_loss, whole.history[0].test_loss, 1e-4);
  std::filesystem::remove_all(root);
}

#endif  // KILN_WITH_GLOO

}  // namespace
}  // namespace kiln::apps::lenet::testing
