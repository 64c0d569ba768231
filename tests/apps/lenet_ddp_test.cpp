// kiln-lenet --ddp (Note [kiln-lenet with DDP]): two processes with a batch
// of B each train as one process with a batch of 2B, alone or with
// gradient accumulation, and only rank 0 writes the log; a checkpoint of two
// processes resumes on one or four (Note [Resuming on another world size]);
// --dp splits each batch between replicas in one process, with the same
// result.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "apps/lenet/data_parallel.h"
#include "apps/lenet/trainer.h"
#include "distributed/file_store.h"
#include "distributed/init.h"
#include "distributed/multi_process.h"
#include "lenet_distributed_test_data.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet::testing {
namespace {

using distributed::testing::run_on_ranks;
using distributed::testing::test_store_dir;

TrainerOptions run_on(const std::string& data) {
  TrainerOptions o;
  o.data = data;
  o.epochs = 2;
  o.threads = 1;
  return o;
}

// The same run in one process with the global batch and, in `world`
// processes, with `per_rank` x accum_steps images per rank and step.
void expect_ddp_run_matches_one_process(int64_t per_rank, int64_t accum_steps) {
  run_on_ranks(2, [=](int rank) {
    const std::string data = shared_data(rank);
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank,
                                    std::chrono::seconds(20));
    TrainerOptions o = run_on(data);
    o.ddp = true;
    o.batch_size = per_rank;
    o.accum_steps = accum_steps;
    o.log = test_store_dir() + "/ddp.jsonl";
    const TrainingResult ddp = train(o).result;
    distributed::destroy_process_group();

    TrainerOptions single = run_on(data);
    single.batch_size = per_rank * accum_steps * 2;
    const TrainingResult one = train(single).result;

    // float32, 20 steps: the two sum their gradients in other orders.
    EXPECT_LE(max_difference(*ddp.model, *one.model), 2e-5);
    ASSERT_EQ(ddp.history.size(), 2u);
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(ddp.history[e].train_loss, one.history[e].train_loss, 1e-4);
      EXPECT_NEAR(ddp.history[e].test_loss, one.history[e].test_loss, 1e-4);
      EXPECT_EQ(ddp.history[e].test_accuracy, one.history[e].test_accuracy);
    }
    EXPECT_EQ(ddp.evaluation.images, 100);  // every test image once, over both ranks
    EXPECT_EQ(ddp.global_step, one.global_step);
    // Rank 0 alone wrote the log: one line per epoch.
    if (rank == 0) {
      EXPECT_EQ(read_lines(o.log).size(), 2u);
    }
  });
}

TEST(LenetTrainerDdp, TwoRanksWithBatch10TrainAsOneProcessWithBatch20) { expect_ddp_run_matches_one_process(10, 1); }

TEST(LenetTrainerDdp, TwoRanksAccumulatingTwoBatchesOf5TrainAsOneProcessWithBatch20) {
  expect_ddp_run_matches_one_process(5, 2);
}

// The images each global step of an epoch trains on, sorted, over the
// ranks' samplers with `per_rank` images per rank and step.
std::vector<std::vector<int64_t>> global_steps(std::vector<std::shared_ptr<data::Sampler>> ranks, int64_t per_rank,
                                               int64_t epoch) {
  std::vector<std::vector<int64_t>> steps;
  for (auto& sampler : ranks) {
    sampler->set_epoch(epoch);
    const std::vector<int64_t> mine = sampler->indices();
    EXPECT_EQ(static_cast<int64_t>(mine.size()), sampler->size());
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t step = k / static_cast<size_t>(per_rank);
      if (steps.size() <= step) steps.resize(step + 1);
      steps[step].push_back(mine[k]);
    }
  }
  for (auto& step : steps) std::sort(step.begin(), step.end());
  return steps;
}

std::vector<std::shared_ptr<data::Sampler>> shards(int world, int64_t n, uint64_t seed, CarriedEpoch carried) {
  std::vector<std::shared_ptr<data::Sampler>> out;
  for (int r = 0; r < world; ++r) {
    out.push_back(train_sampler({.group = nullptr, .rank = r, .world_size = world}, n, seed, carried));
    if (!out.back()) out.back() = std::make_shared<data::RandomSampler>(n, seed);  // one process: the loader's
  }
  return out;
}

// 11 images over 2 ranks are padded to 12; carried to 4 ranks (or 1), each
// global step of the carried epoch holds the images it held on 2, the
// padding's repeat included; the next epoch is an ordinary 4-rank one.
TEST(LenetDataParallel, ACarriedEpochTrainsEachStepOnTheSavedRunsImages) {
  const int64_t n = 11;
  const uint64_t seed = 3;
  std::vector<std::shared_ptr<data::Sampler>> saved;
  for (int r = 0; r < 2; ++r) saved.push_back(std::make_shared<data::DistributedSampler>(n, 2, r, true, seed));
  const auto expected = global_steps(saved, 2, 1);  // global batch 4
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(global_steps(shards(4, n, seed, {.epoch = 1, .replicas = 2}), 1, 1), expected);
  EXPECT_EQ(global_steps(shards(1, n, seed, {.epoch = 1, .replicas = 2}), 4, 1), expected);

  std::vector<std::shared_ptr<data::Sampler>> four;
  for (int r = 0; r < 4; ++r) four.push_back(std::make_shared<data::DistributedSampler>(n, 4, r, true, seed));
  EXPECT_EQ(global_steps(shards(4, n, seed, {.epoch = 1, .replicas = 2}), 1, 2), global_steps(four, 1, 2));

  // 12 positions do not split over 5 ranks.
  try {
    shards(5, n, seed, {.epoch = 1, .replicas = 2});
    ADD_FAILURE() << "5 ranks took an order of 12";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("its order of 12 positions (11 images padded for 2 processes) cannot be split evenly "
                               "over 5 processes"),
              std::string::npos)
        << e.message();
  }
}

// An epoch of 195 images over 2 processes with a global batch of 4: 49
// steps, the last of 4 images (one repeated: the order is padded to 196 for
// 2 processes), where one process alone would take 3. Stopped at step 32
// and resumed on 4 processes with --batch-size 1, or in 1 with
// --batch-size 4, each finishes the epoch on the images the 2 processes
// would have, and ends with the weights and losses of the 2 processes that
// never stopped.
TEST(LenetTrainerDdp, TwoProcessCheckpointResumesOnOneAndOnFourProcesses) {
  const std::string root = apps::testing::shared_folder("kiln-lenet-reshard");
  if (!distributed::testing::in_rank_process()) {
    std::filesystem::remove_all(root);
    write_synthetic_cifar(root, 39);
  }
  auto options = [&](int world) {
    TrainerOptions o = run_on(root);
    o.epochs = 1;
    o.batch_size = 4 / world;
    o.ddp = world > 1;
    return o;
  };
  run_on_ranks(2, [&](int rank) {
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank, std::chrono::seconds(20));
    TrainerOptions o = options(2);
    o.save = root + "/whole.ckpt";
    EXPECT_EQ(train(o).result.global_step, 49);
    o.save = root + "/two.ckpt";
    const TrainingResult r = train(o, [](int64_t step) { return step >= 20; }).result;  // agreed at step 32
    distributed::destroy_process_group();
    EXPECT_EQ(r.status, RunStatus::Interrupted);
    EXPECT_EQ(r.step_in_epoch, 32);
  });
  distributed::testing::RankOptions four_ranks;
  four_ranks.deadline = std::chrono::seconds(120);
  run_on_ranks(4, [&](int rank) {
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 4, rank, std::chrono::seconds(20));
    TrainerOptions o = options(4);
    o.resume = root + "/two.ckpt";
    o.save = root + "/four.ckpt";
    const TrainingResult r = train(o).result;
    distributed::destroy_process_group();
    EXPECT_EQ(r.status, RunStatus::Finished);
    EXPECT_EQ(r.global_step, 49);
  }, four_ranks);
  if (distributed::testing::in_rank_process()) return;

  TrainerOptions one = options(1);
  one.resume = root + "/two.ckpt";
  const TrainingResult on_one = train(one).result;
  EXPECT_EQ(on_one.global_step, 49);
  const Checkpointed whole(root + "/whole.ckpt"), on_four(root + "/four.ckpt");

  // float32, the gradients summed in other orders.
  EXPECT_LE(max_difference(*on_one.model, whole.model), 2e-5);
  EXPECT_LE(max_difference(on_four.model, whole.model), 2e-5);
  ASSERT_EQ(on_one.history.size(), 1u);
  ASSERT_EQ(on_four.history.size(), 1u);
  // The loss sums the 2 processes' first 32 steps and the resumed ones.
  EXPECT_NEAR(on_one.history[0].train_loss, whole.history[0].train_loss, 1e-5);
  EXPECT_NEAR(on_four.history[0].train_loss, whole.history[0].train_loss, 1e-5);
  EXPECT_NEAR(on_four.history[0].test_loss, whole.history[0].test_loss, 1e-5);
  std::filesystem::remove_all(root);
}

TEST(LenetTrainer, AccumulatingTwoBatchesOf10TrainsAsOneBatchOf20) {
  TempDir dir("kiln-lenet-accum");
  write_synthetic_cifar(dir.path());
  TrainerOptions accumulated = small_run(dir);
  accumulated.batch_size = 10;
  accumulated.accum_steps = 2;
  TrainerOptions whole = small_run(dir);
  whole.batch_size = 20;
  const TrainingResult a = train(accumulated).result, w = train(whole).result;
  EXPECT_EQ(a.global_step, w.global_step);
  EXPECT_LE(max_difference(*a.model, *w.model), 2e-5);
}

TEST(LenetTrainer, DataParallelOverTwoCpuReplicasTrainsAsOneModule) {
  TempDir dir("kiln-lenet-dp");
  write_synthetic_cifar(dir.path());
  TrainerOptions split = small_run(dir);
  split.dp = true;
  split.replicas = 2;
  const TrainingResult d = train(split).result, w = train(small_run(dir)).result;
  EXPECT_EQ(d.global_step, w.global_step);
  EXPECT_LE(max_difference(*d.model, *w.model), 2e-5);
  EXPECT_EQ(d.evaluation.accuracy, w.evaluation.accuracy);
}

}  // namespace
}  // namespace kiln::apps::lenet::testing

#endif  // KILN_WITH_GLOO
