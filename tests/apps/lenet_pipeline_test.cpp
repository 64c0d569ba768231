// kiln-lenet --pp (Note [Trainers under pipeline parallelism]): LeNet cut
// into stages over two processes trains as one process with the same batch
// (an epoch's short last batch through a fill-drain pipeline included), its
// test accuracy from the stages gathered to every rank; under kiln-run the
// program trains; the flags --pp cannot go with yet are refused by name.
#include <gtest/gtest.h>

#include <string>

#include "apps/lenet/options.h"
#include "lenet_test_data.h"

#ifdef KILN_WITH_GLOO
#include "distributed/init.h"
#include "kiln_run_process.h"
#include "lenet_distributed_test_data.h"
#endif

namespace kiln::apps::lenet {
namespace {

using testing::TempDir;

std::string parse_error(const std::vector<std::string>& args) {
  return apps::testing::command_line_error([](const std::vector<std::string>& argv) { parse_command_line(argv); },
                                           "kiln-lenet", args);
}

TEST(LenetPipelineOptions, PipelineFlagsAreRead) {
  const CommandLine cl = parse_command_line(
      std::vector<std::string>{"kiln-lenet", "--pp", "2", "--pp-schedule", "gpipe", "--micro-batches", "8"});
  ASSERT_TRUE(cl.options.has_value());
  EXPECT_EQ(cl.options->pp, 2);
  EXPECT_EQ(cl.options->pp_schedule, "gpipe");
  EXPECT_EQ(cl.options->micro_batches, 8);
  TrainerOptions o;
  o.pp = 2;
  EXPECT_EQ(training_schedule(pipeline_flags(o), o.batch_size).num_micro_batches, 4);
}

TEST(LenetPipelineOptions, FlagsPpCannotGoWithAreRefusedByName) {
  EXPECT_EQ(parse_error({"--pp", "2", "--ddp"}),
            "--pp and --ddp exclude each other for now: a pipeline stage is not replicated or sharded yet; give one");
  EXPECT_NE(parse_error({"--pp", "2", "--fsdp"}).find("--pp and --fsdp exclude each other"), std::string::npos);
  EXPECT_NE(parse_error({"--pp", "2", "--dp"}).find("--pp and --dp exclude each other"), std::string::npos);
  EXPECT_EQ(parse_error({"--pp", "2", "--save", "x.ckpt"}),
            "--pp with --save is not supported yet: kiln-lenet pipelines plain float32 training steps, without "
            "checkpoints");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--resume", "x.ckpt"}, {"--amp"}, {"--accum-steps", "2"}}) {
    std::vector<std::string> all = {"--pp", "2"};
    all.insert(all.end(), args.begin(), args.end());
    EXPECT_NE(parse_error(all).find("--pp with " + args[0] + " is not supported yet"), std::string::npos) << args[0];
  }
  EXPECT_EQ(parse_error({"--pp", "2", "--model", "resnet20"}),
            "--pp cuts LeNet into stages; --model resnet20 is not a Sequential yet");
  EXPECT_EQ(parse_error({"--pp", "2", "--device", "cuda"}),
            "--pp runs on the CPU only for now (stages exchange activations over gloo), got --device cuda");
  EXPECT_EQ(parse_error({"--pp", "2", "--pp-schedule", "gpipe2"}),
            "--pp-schedule: unknown pipeline schedule 'gpipe2' (expected gpipe, 1f1b, interleaved or zero-bubble)");
  EXPECT_EQ(parse_error({"--pp-schedule", "gpipe"}), "--pp-schedule only goes with --pp");
}

#ifdef KILN_WITH_GLOO

using distributed::testing::run_on_ranks;
using distributed::testing::test_store_dir;
using testing::max_difference;
using testing::shared_data;
using testing::train;

// Two ranks under --pp 2 with `schedule` and one process, with batches of
// 13 of the 200 synthetic images: 15 full batches (4 micro-batches of 4, 4,
// 4, 1) and a last one of 5, which 4 micro-batches cannot split (2, 2, 1
// and none): it goes through a fill-drain pipeline of 3. SGD with momentum
// and the one-cycle schedule for 2 epochs; float32, the pipeline summing
// each batch's gradients from its micro-batches', within the bounds of
// the --ddp test (lenet_ddp_test.cpp).
void expect_pipeline_run_matches_one_process(const std::string& schedule) {
  run_on_ranks(2, [=](int rank) {
    const std::string data = shared_data(rank);
    distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank, std::chrono::seconds(20));
    TrainerOptions o;
    o.data = data;
    o.epochs = 2;
    o.threads = 1;
    o.batch_size = 13;
    o.pp = 2;
    o.pp_schedule = schedule;
    const testing::Trained piped = train(o);
    distributed::destroy_process_group();
    o.pp = 0;
    o.pp_schedule = "1f1b";
    const TrainingResult one = train(o).result;

    EXPECT_LE(max_difference(*piped.result.model, *one.model), 2e-5);
    ASSERT_EQ(piped.result.history.size(), 2u);
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(piped.result.history[e].train_loss, one.history[e].train_loss, 1e-4);
      EXPECT_NEAR(piped.result.history[e].test_loss, one.history[e].test_loss, 1e-4);
      EXPECT_EQ(piped.result.history[e].test_accuracy, one.history[e].test_accuracy);
    }
    EXPECT_GT(one.history.back().test_accuracy, 0.35);  // above chance (0.25) on the four brightness classes
    EXPECT_EQ(piped.result.evaluation.images, 100);     // every test image once, over both ranks
    EXPECT_EQ(piped.result.global_step, 32);
    if (rank == 0) {
      EXPECT_NE(piped.out.find("pipeline of " + std::string(schedule == "interleaved" ? "4" : "2") +
                               " stages over 2 processes (gloo), schedule " + schedule + ", 4 micro-batches"),
                std::string::npos)
          << piped.out;
    } else {
      EXPECT_EQ(piped.out.find("epoch 2/2  train loss"), std::string::npos) << piped.out;
    }
  });
}

TEST(LenetTrainerPipeline, TwoStagesOneFOneBTrainAsOneProcess) { expect_pipeline_run_matches_one_process("1f1b"); }

TEST(LenetTrainerPipeline, FourInterleavedStagesOnTwoRanksTrainAsOneProcess) {
  expect_pipeline_run_matches_one_process("interleaved");
}

TEST(LenetProgramPipeline, TrainsUnderKilnRun) {
  TempDir dir("kiln-lenet-pp-kiln-run");
  testing::write_synthetic_cifar(dir.path());
  const run::testing::RunResult r =
      run::testing::run_kiln_run({"--nproc-per-node", "2", "--master-port", "0", KILN_LENET_EXE, "--pp", "2", "--data",
                                  dir.path().string(), "--epochs", "1", "--batch-size", "20", "--threads", "1"},
                                 std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("schedule 1f1b, 4 micro-batches, modules per stage 8 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 0] epoch 1/1  train loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test accuracy per class"), std::string::npos) << r.out;
}

#endif  // KILN_WITH_GLOO

}  // namespace
}  // namespace kiln::apps::lenet
