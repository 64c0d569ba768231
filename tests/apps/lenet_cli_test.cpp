// kiln-lenet as a program: its flags, its error messages and exit codes,
// and Ctrl-C (a real SIGINT to a child process).
#include <gtest/gtest.h>

#include "apps/lenet/options.h"
#include "apps/lenet/trainer.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet {
namespace {

using testing::TempDir;

std::string parse_error(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"kiln-lenet"};
  argv.insert(argv.end(), args.begin(), args.end());
  try {
    parse_command_line(argv);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(LenetOptions, DefaultsAreTheRecipe) {
  CommandLine cl = parse_command_line(std::vector<std::string>{"kiln-lenet"});
  ASSERT_TRUE(cl.options.has_value());
  const TrainerOptions& o = *cl.options;
  EXPECT_EQ(o.epochs, 30);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.lr, 0.02);
  EXPECT_EQ(o.momentum, 0.9);
  EXPECT_EQ(o.weight_decay, 5e-4);
  EXPECT_EQ(o.optimizer, OptimizerKind::SGD);
  EXPECT_EQ(o.schedule, ScheduleKind::OneCycle);
  EXPECT_TRUE(o.augment);
  EXPECT_EQ(o.seed, 0u);
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.workers, 0);
}

TEST(LenetOptions, FlagsAreRead) {
  CommandLine cl = parse_command_line(std::vector<std::string>{
      "kiln-lenet", "--data", "d", "--epochs", "3", "--batch-size", "8", "--lr", "0.1", "--optimizer", "adamw",
      "--schedule", "cosine", "--no-augment", "--threads", "2", "--workers", "3", "--seed", "7", "--save", "a.ckpt",
      "--log", "a.jsonl", "--plot", "a.svg"});
  ASSERT_TRUE(cl.options.has_value());
  const TrainerOptions& o = *cl.options;
  EXPECT_EQ(o.data, "d");
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.batch_size, 8);
  EXPECT_EQ(o.lr, 0.1);
  EXPECT_EQ(o.optimizer, OptimizerKind::AdamW);
  EXPECT_EQ(o.schedule, ScheduleKind::Cosine);
  EXPECT_FALSE(o.augment);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.workers, 3);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.save, "a.ckpt");
  EXPECT_EQ(o.log, "a.jsonl");
  EXPECT_EQ(o.plot, "a.svg");
  CommandLine off = parse_command_line(std::vector<std::string>{"kiln-lenet", "--augment=off"});
  EXPECT_FALSE(off.options->augment);
}

TEST(LenetOptions, BadValuesAreNamed) {
  EXPECT_EQ(parse_error({"--batch-size", "0"}), "--batch-size must be at least 1, got 0");
  EXPECT_EQ(parse_error({"--epochs", "-1"}), "--epochs must be at least 1, got -1");
  EXPECT_EQ(parse_error({"--optimizer", "rmsprop"}), "--optimizer: unknown optimizer 'rmsprop' (expected sgd, adam or adamw)");
  EXPECT_EQ(parse_error({"--schedule", "step"}), "--schedule: unknown schedule 'step' (expected none, cosine or onecycle)");
  EXPECT_EQ(parse_error({"--lr", "0"}), "--lr must be positive, got 0");
  EXPECT_EQ(parse_error({"--momentum", "1.5"}), "--momentum must be in [0, 1), got 1.5");
  EXPECT_EQ(parse_error({"--device", "tpu"}), "--device: unknown device 'tpu' (expected cpu, cuda or cuda:N)");
  EXPECT_EQ(parse_error({"--workers", "-2"}),
            "--workers must be non-negative (0: load batches on the training thread), got -2");
  EXPECT_NE(parse_error({"--eval-only"}).find("--eval-only needs the model to evaluate"), std::string::npos);
  EXPECT_NE(parse_error({"--weights", "w.safetensors"}).find("--weights only goes with --eval-only"),
            std::string::npos);
}

TEST(LenetProgram, HelpDocumentsEveryFlag) {
  TempDir dir("kiln-lenet-help");
  testing::ProcessResult r = testing::run_kiln_lenet({"--help"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--data", "--epochs", "--batch-size", "--lr", "--momentum", "--weight-decay", "--optimizer",
                           "--schedule", "--augment", "--threads", "--device", "--seed", "--workers", "--save",
                           "--resume", "--eval-only", "--log", "--plot"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " missing from:\n" << r.out;
  }
}

TEST(LenetProgram, ErrorsArePrintedWithExitCode1) {
  TempDir dir("kiln-lenet-errors");
  testing::ProcessResult r = testing::run_kiln_lenet({"--batch-size", "0"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "kiln-lenet: --batch-size must be at least 1, got 0\n");

  r = testing::run_kiln_lenet({"--data", dir / "missing"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("kiln-lenet: --data '" + (dir / "missing") + "' does not exist (expected a folder", 0), 0u)
      << r.err;

  r = testing::run_kiln_lenet({"--no-such-flag"}, dir / "err.txt");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos) << r.err;
}

// With a GPU the program trains on it; without one it says why and exits 1.
TEST(LenetProgram, CudaTrainsWithAGpuAndIsACleanErrorWithout) {
  TempDir dir("kiln-lenet-cuda-program");
  testing::write_synthetic_cifar(dir.path());
  testing::ProcessResult r = testing::run_kiln_lenet(
      {"--data", dir.path().string(), "--device", "cuda", "--epochs", "1", "--batch-size", "50"}, dir / "err.txt");
  EXPECT_EQ(r.signal, 0);
  if (testing::gpu_present()) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
  } else {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err.rfind("kiln-lenet: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
  }
}

// Ctrl-C with --save: the step in progress finishes, the checkpoint is
// written, the program exits with 130; --resume then completes the run.
TEST(LenetProgram, SigintSavesCheckpointAndResumeFinishes) {
  TempDir dir("kiln-lenet-sigint");
  testing::write_synthetic_cifar(dir.path());
  const std::string ckpt = dir / "run.ckpt";
  std::vector<std::string> args = {"--data", dir.path().string(), "--epochs", "6", "--batch-size", "20",
                                   "--threads", "1", "--workers", "1", "--save", ckpt, "--log", dir / "run.jsonl"};
  bool sent = false;
  testing::ProcessResult r = testing::run_kiln_lenet(args, dir / "err.txt", [&](const std::string& line, pid_t pid) {
    // The first progress line of epoch 2: the run is well under way.
    if (!sent && line.rfind("epoch 2/6  step", 0) == 0) {
      ::kill(pid, SIGINT);
      sent = true;
    }
  });
  ASSERT_TRUE(sent) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 130) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpoint saved to " + ckpt), std::string::npos) << r.out;
  ASSERT_TRUE(std::filesystem::exists(ckpt));

  args.push_back("--resume");
  args.push_back(ckpt);
  testing::ProcessResult resumed = testing::run_kiln_lenet(args, dir / "err.txt");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resuming " + ckpt), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("epoch 6/6  train loss"), std::string::npos) << resumed.out;
  EXPECT_EQ(testing::read_lines(dir / "run.jsonl").size(), 6u);
}

TEST(LenetProgram, SigintWithoutSaveEndsTheProcess) {
  TempDir dir("kiln-lenet-sigint-nosave");
  testing::write_synthetic_cifar(dir.path());
  bool sent = false;
  testing::ProcessResult r = testing::run_kiln_lenet(
      {"--data", dir.path().string(), "--epochs", "1000", "--batch-size", "20", "--threads", "1"}, dir / "err.txt",
      [&](const std::string& line, pid_t pid) {
        if (!sent && line.find("step") != std::string::npos) {
          ::kill(pid, SIGINT);
          sent = true;
        }
      });
  ASSERT_TRUE(sent);
  EXPECT_EQ(r.signal, SIGINT);
}

TEST(LenetProgram, EvalOnlyPrintsTheTable) {
  TempDir dir("kiln-lenet-eval-program");
  testing::write_synthetic_cifar(dir.path());
  const std::string ckpt = dir / "run.ckpt";
  testing::ProcessResult r = testing::run_kiln_lenet(
      {"--data", dir.path().string(), "--epochs", "1", "--batch-size", "20", "--save", ckpt}, dir / "err.txt");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::run_kiln_lenet({"--data", dir.path().string(), "--eval-only", "--resume", ckpt}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("automobile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/100"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln::apps::lenet
