// kiln-gpt train --pp (Note [Trainers under pipeline parallelism]): two
// processes, each holding one stage of the GPT (or two with interleaved),
// train as one process with the same batch: the same evaluations and
// weights within float32 rounding, the first evaluation bit for bit; under
// kiln-run the program trains and rank 0 prints; the flags --pp cannot go
// with yet, a bad schedule and a process count other than --pp are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "apps/gpt/trainer.h"
#include "gpt_test_data.h"
#include "kiln.h"

#ifdef KILN_WITH_GLOO
#include <chrono>

#include "distributed/init.h"
#include "distributed/multi_process.h"
#include "kiln_run_process.h"
#endif

namespace kiln::apps::gpt {
namespace {

using testing::contains;
using testing::parse_error;
using testing::TempDir;

TEST(GptPipelineOptions, PipelineFlagsAreReadWithTheirDefaults) {
  const CommandLine cl = parse_command_line(std::vector<std::string>{"kiln-gpt", "train", "--pp", "2", "--schedule",
                                                                     "interleaved", "--micro-batches", "4",
                                                                     "--virtual-stages", "3", "--batch-size", "8"});
  ASSERT_TRUE(cl.train.has_value());
  EXPECT_EQ(cl.train->pp, 2);
  EXPECT_EQ(cl.train->pp_schedule, "interleaved");
  EXPECT_EQ(cl.train->micro_batches, 4);
  EXPECT_EQ(cl.train->virtual_stages, 3);
  const distributed::pipeline::Schedule s = training_schedule(pipeline_flags(*cl.train), 8);
  EXPECT_EQ(s.num_stages, 6);
  EXPECT_EQ(s.num_micro_batches, 4);

  TrainOptions o;
  o.pp = 2;
  o.batch_size = 32;
  const distributed::pipeline::Schedule plain = training_schedule(pipeline_flags(o), o.batch_size);
  EXPECT_EQ(plain.name, "1f1b");
  EXPECT_EQ(plain.num_micro_batches, 4);  // 2N
  EXPECT_EQ(plain.num_stages, 2);
  // 3 examples cannot give 4 micro-batches (2, 1, and none); 3 it can.
  o.batch_size = 3;
  EXPECT_EQ(micro_batches(pipeline_flags(o), o.batch_size), 3);
  o.pp_schedule = "interleaved";  // a multiple of N: 2
  EXPECT_EQ(micro_batches(pipeline_flags(o), o.batch_size), 2);
  EXPECT_EQ(virtual_stages(pipeline_flags(o)), 2);
}

TEST(GptPipelineOptions, FlagsPpCannotGoWithAreRefusedByName) {
  EXPECT_EQ(parse_error({"train", "--pp", "2", "--ddp"}),
            "--pp and --ddp exclude each other for now: a pipeline stage is not replicated or sharded over a "
            "data-parallel group yet; give one");
  EXPECT_TRUE(contains(parse_error({"train", "--pp", "2", "--fsdp"}), "--pp and --fsdp exclude each other"));
  EXPECT_EQ(parse_error({"train", "--pp", "2", "--save", "x.ckpt"}),
            "--pp with --save is not supported yet: kiln-gpt does not write or read the checkpoints of a model cut "
            "into pipeline stages");
  EXPECT_TRUE(contains(parse_error({"train", "--pp", "2", "--resume", "x.ckpt"}), "--pp with --resume"));
  EXPECT_TRUE(contains(parse_error({"train", "--pp", "2", "--amp"}), "--pp with --amp is not supported yet"));
  EXPECT_EQ(parse_error({"train", "--pp", "2", "--device", "cuda"}),
            "--pp runs on the CPU only for now (stages exchange activations over gloo), got --device cuda");
  EXPECT_EQ(parse_error({"train", "--pp", "-1"}), "--pp must be from 1 to 4096 processes (0: no pipeline), got -1");
}

TEST(GptPipelineOptions, BadSchedulesAndMicroBatchesAreRefused) {
  EXPECT_EQ(parse_error({"train", "--pp", "2", "--schedule", "pipedream"}),
            "--schedule: unknown pipeline schedule 'pipedream' (expected gpipe, 1f1b, interleaved or zero-bubble)");
  EXPECT_EQ(parse_error({"train", "--schedule", "gpipe"}), "--schedule only goes with --pp");
  EXPECT_EQ(parse_error({"train", "--micro-batches", "4"}), "--micro-batches only goes with --pp");
  EXPECT_EQ(parse_error({"train", "--pp", "2", "--virtual-stages", "2"}),
            "--virtual-stages 2 only goes with --schedule interleaved (got 1f1b)");
  EXPECT_EQ(parse_error({"train", "--pp", "2", "--batch-size", "5", "--micro-batches", "4"}),
            "--micro-batches 4 does not fit a batch of 5 examples (--batch-size): micro-batches of 2 leave the last "
            "one empty");
  EXPECT_TRUE(contains(parse_error({"train", "--pp", "2", "--schedule", "interleaved", "--micro-batches", "3"}),
                       "--pp 2 --schedule interleaved --micro-batches 3: "))
      << parse_error({"train", "--pp", "2", "--schedule", "interleaved", "--micro-batches", "3"});
  EXPECT_EQ(parse_error({"train", "--pp", "4", "--schedule", "interleaved", "--batch-size", "3"}),
            "--pp 4 --schedule interleaved: a batch of 3 examples (--batch-size) gives no micro-batch count up to 8 "
            "that is a multiple of --pp; give --micro-batches or a larger --batch-size");
  EXPECT_EQ(parse_error({"train", "--backend", "mpi"}), "--backend mpi only goes with --ddp, --fsdp or --pp");
  EXPECT_EQ(parse_error({"train", "--pp", "2", "--backend", "mpi"}), "");
}

TEST(GptPipelineOptions, EveryStageLayoutHasAnEvaluationScheduleOfOneMicroBatch) {
  namespace pp = distributed::pipeline;
  for (const auto& [name, v] : {std::pair{"1f1b", 1}, std::pair{"interleaved", 2}, std::pair{"interleaved", 3}}) {
    const pp::Schedule training = pp::make_schedule(name, 3, 6, v);
    const pp::Schedule eval = evaluation_schedule(training);
    EXPECT_EQ(eval.num_micro_batches, 1);
    EXPECT_EQ(eval.stage_rank, training.stage_rank);
    // Rank 0 forwards its stages in order and backwards them in reverse.
    std::vector<pp::Action> compute;
    for (const pp::Action& a : eval.ranks[0])
      if (pp::is_compute(a.type)) compute.push_back(a);
    ASSERT_EQ(compute.size(), 2u * v);
    for (int i = 0; i < v; ++i) {
      EXPECT_EQ(compute[i], (pp::Action{pp::ActionType::Forward, 3 * i, 0}));
      EXPECT_EQ(compute[2 * v - 1 - i], (pp::Action{pp::ActionType::Backward, 3 * i, 0}));
    }
  }
}

TEST(GptPipelineProgram, WrongFlagsExitWithCode1SayingWhy) {
  TempDir dir("kiln-gpt-pp-flags");
  const testing::ProcessResult r = testing::run_kiln_gpt({"train", "--pp", "2", "--ddp"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kiln-gpt: --pp and --ddp exclude each other", 0), 0u) << r.err;
  const testing::ProcessResult help = testing::run_kiln_gpt({"train", "--help"}, dir / "err.txt");
  for (const char* flag : {"--pp", "--schedule", "--micro-batches", "--virtual-stages"}) {
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

Trained train(const TrainOptions& o) {
  std::ostringstream out, err;
  TrainingResult r = run_training(o, {.out = &out, .err = &err});
  return {std::move(r), out.str()};
}

double max_difference(const nn::Module& a, const nn::Module& b) {
  const TensorDict pa = a.named_parameters(), pb = b.named_parameters();
  EXPECT_EQ(pa.keys(), pb.keys());
  double worst = 0;
  for (const auto& [name, t] : pa) worst = std::max(worst, max(abs(t - pb.at(name))).item<double>());
  return worst;
}

// float32, 12 steps of AdamW at lr 1e-2 with clipping: the pipeline sums a
// batch's loss and gradients from its micro-batches' (each scaled by its
// share), one process from the whole batch at once, which moves the weights
// by a few ulps of their updates, as under --ddp and --fsdp
// (gpt_fsdp_test.cpp). A wrong stage, a gradient lost or counted twice, or
// the tied embedding's two uses not summed, moves them by the lr's order
// (1e-3 and more after 12 steps).
constexpr double kWeightTolerance = 1e-4;
constexpr double kLossTolerance = 1e-4;

TrainOptions tiny_pipeline_run(int rank) {
  static const TempDir own("kiln-gpt-pp-rank" + std::to_string(rank));
  TrainOptions o = testing::tiny_run(own);
  o.n_layer = 2;  // a block per stage
  return o;
}

// Two ranks under --pp 2 with `schedule` train as one process: the same
// evaluations (the first bit for bit: nothing has been trained yet, and the
// evaluation pipeline takes each batch whole) and, on every rank, the
// same gathered weights within float32 rounding.
void expect_pipeline_run_matches_one_process(const std::string& schedule) {
  distributed::testing::RankOptions options;
  options.deadline = std::chrono::seconds(180);
  run_on_ranks(
      2,
      [=](int rank) {
        distributed::init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank,
                                        std::chrono::seconds(30));
        TrainOptions o = tiny_pipeline_run(rank);
        o.pp = 2;
        o.pp_schedule = schedule;
        const Trained piped = train(o);
        distributed::destroy_process_group();
        EXPECT_EQ(piped.result.step, 12);
        const std::string me = "rank " + std::to_string(rank) + " memory ";
        EXPECT_TRUE(contains(piped.out, me + "at the end: params ")) << piped.out;

        TrainOptions single = tiny_pipeline_run(rank);
        const Trained one = train(single);
        // Every rank returns the whole model, gathered from both stages.
        EXPECT_LE(max_difference(*piped.result.model, *one.result.model), kWeightTolerance);
        if (rank != 0) {
          EXPECT_FALSE(contains(piped.out, "train loss")) << piped.out;
          return;
        }
        EXPECT_TRUE(contains(piped.out, "pipeline of " + std::to_string(schedule == "interleaved" ? 4 : 2) +
                                            " stages over 2 processes (gloo), schedule " + schedule))
            << piped.out;
        EXPECT_TRUE(contains(piped.out, "batch 4, steps 12")) << piped.out;  // the whole batch
        const auto& a = piped.result.history;
        const auto& b = one.result.history;
        ASSERT_EQ(a.size(), b.size());
        ASSERT_EQ(a.size(), 4u);
        EXPECT_EQ(a[0].train_loss, b[0].train_loss);
        EXPECT_EQ(a[0].val_loss, b[0].val_loss);
        for (size_t i = 0; i < a.size(); ++i) {
          EXPECT_EQ(a[i].step, b[i].step);
          EXPECT_NEAR(a[i].train_loss, b[i].train_loss, kLossTolerance) << "evaluation " << i;
          EXPECT_NEAR(a[i].val_loss, b[i].val_loss, kLossTolerance) << "evaluation " << i;
        }
        EXPECT_LT(a.back().val_loss, a.front().val_loss - 0.1);  // it learned
      },
      options);
}

TEST(GptTrainerPipeline, TwoStagesOneFOneBTrainAsOneProcess) { expect_pipeline_run_matches_one_process("1f1b"); }

TEST(GptTrainerPipeline, FourInterleavedStagesOnTwoRanksTrainAsOneProcess) {
  expect_pipeline_run_matches_one_process("interleaved");
}

// The program under kiln-run: two processes train, rank 0 prints the
// evaluations; three processes for --pp 2 are refused on every rank.
TEST(GptProgramPipeline, TrainsUnderKilnRunAndRefusesAnotherProcessCount) {
  TempDir dir("kiln-gpt-pp-kiln-run");
  const std::string text = testing::write_small_text(dir / "text.txt");
  const std::vector<std::string> args = {
      KILN_GPT_EXE,     "train", "--pp",      "2", "--schedule",     "zero-bubble", "--data",          text,
      "--layers",       "2",     "--heads",   "2", "--width",        "16",          "--block-size",    "16",
      "--batch-size",   "4",     "--steps",   "6", "--warmup-steps", "2",           "--eval-interval", "3",
      "--eval-batches", "2",     "--threads", "1"};
  std::vector<std::string> two = {"--nproc-per-node", "2", "--master-port", "0"};
  two.insert(two.end(), args.begin(), args.end());
  const run::testing::RunResult r = run::testing::run_kiln_run(two, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "schedule zero-bubble, 4 micro-batches")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 0] step 6/6  train loss")) << r.out;
  EXPECT_FALSE(contains(r.out, "[rank 1] step")) << r.out;

  std::vector<std::string> three = {"--nproc-per-node", "3", "--master-port", "0"};
  three.insert(three.end(), args.begin(), args.end());
  const run::testing::RunResult bad = run::testing::run_kiln_run(three, std::chrono::seconds(60));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(contains(bad.out + bad.err,
                       "--pp 2 needs 2 processes (kiln-run --nproc-per-node 2 kiln-gpt train --pp 2) but the "
                       "process group has 3"))
      << bad.out << bad.err;
}

#endif  // KILN_WITH_GLOO

}  // namespace
}  // namespace kiln::apps::gpt
