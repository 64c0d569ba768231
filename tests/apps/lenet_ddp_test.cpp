// kiln-lenet --ddp (Note [kiln-lenet with DDP]): two processes with a batch
// of B each train as one process with a batch of 2B, alone or with
// gradient accumulation, and only rank 0 writes the log; --dp splits each
// batch between replicas in one process, with the same result.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <chrono>
#include <sstream>
#include <string>

#include "apps/lenet/trainer.h"
#include "distributed/file_store.h"
#include "distributed/init.h"
#include "distributed/multi_process.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet::testing {
namespace {

using distributed::testing::run_on_ranks;
using distributed::testing::test_store_dir;

// The synthetic CIFAR-10 folder, written once by rank 0 for both ranks.
std::string shared_data(int rank) {
  const std::string root = test_store_dir() + "/data";
  distributed::FileStore meeting(test_store_dir() + "/meeting", -1, std::chrono::seconds(20));
  if (rank == 0) {
    write_synthetic_cifar(root);
    meeting.set("data written", std::string("1"));
  }
  meeting.wait({"data written"});
  return root;
}

TrainerOptions run_on(const std::string& data) {
  TrainerOptions o;
  o.data = data;
  o.epochs = 2;
  o.threads = 1;
  return o;
}

TrainingResult train(const TrainerOptions& o) {
  std::ostringstream out;
  TrainerHooks hooks;
  hooks.out = &out;
  return run_training(o, hooks);
}

double max_difference(const nn::Module& a, const nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, max(abs(pa[i] - pb[i])).item<double>());
  return worst;
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
    const TrainingResult ddp = train(o);
    distributed::destroy_process_group();

    TrainerOptions single = run_on(data);
    single.batch_size = per_rank * accum_steps * 2;
    const TrainingResult one = train(single);

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

TEST(LenetTrainer, AccumulatingTwoBatchesOf10TrainsAsOneBatchOf20) {
  TempDir dir("kiln-lenet-accum");
  write_synthetic_cifar(dir.path());
  TrainerOptions accumulated = small_run(dir);
  accumulated.batch_size = 10;
  accumulated.accum_steps = 2;
  TrainerOptions whole = small_run(dir);
  whole.batch_size = 20;
  const TrainingResult a = train(accumulated), w = train(whole);
  EXPECT_EQ(a.global_step, w.global_step);
  EXPECT_LE(max_difference(*a.model, *w.model), 2e-5);
}

TEST(LenetTrainer, DataParallelOverTwoCpuReplicasTrainsAsOneModule) {
  TempDir dir("kiln-lenet-dp");
  write_synthetic_cifar(dir.path());
  TrainerOptions split = small_run(dir);
  split.dp = true;
  split.replicas = 2;
  const TrainingResult d = train(split), w = train(small_run(dir));
  EXPECT_EQ(d.global_step, w.global_step);
  EXPECT_LE(max_difference(*d.model, *w.model), 2e-5);
  EXPECT_EQ(d.evaluation.accuracy, w.evaluation.accuracy);
}

}  // namespace
}  // namespace kiln::apps::lenet::testing

#endif  // KILN_WITH_GLOO
