// kiln-lenet as a program: its flags, its error messages and exit codes,
// and Ctrl-C (a real SIGINT to a child process).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "apps/lenet/options.h"
#include "apps/lenet/trainer.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet {
namespace {

using testing::TempDir;
using testing::parse_error;

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
      "--log", "a.jsonl", "--plot", "a.svg", "--ddp", "--timeout", "30", "--heartbeat-timeout", "2.5"});
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
  EXPECT_EQ(o.timeout, 30.0);
  EXPECT_EQ(o.heartbeat_timeout, 2.5);
  for (const auto& [name, kind] : {std::pair{"adam8bit", OptimizerKind::Adam8bit}, std::pair{"adamw8bit", OptimizerKind::AdamW8bit}})
    EXPECT_EQ(parse_command_line(std::vector<std::string>{"kiln-lenet", "--optimizer", name}).options->optimizer, kind);
  CommandLine off = parse_command_line(std::vector<std::string>{"kiln-lenet", "--augment=off"});
  EXPECT_FALSE(off.options->augment);
}

TEST(LenetOptions, BadValuesAreNamed) {
  EXPECT_EQ(parse_error({"--batch-size", "0"}), "--batch-size must be at least 1, got 0");
  EXPECT_EQ(parse_error({"--epochs", "-1"}), "--epochs must be at least 1, got -1");
  EXPECT_EQ(parse_error({"--optimizer", "rmsprop"}),
            "--optimizer: unknown optimizer 'rmsprop' (expected sgd, adam, adamw, adam8bit or adamw8bit)");
  EXPECT_EQ(parse_error({"--optimizer", "adamw8bit", "--device", "cuda"}),
            "--optimizer adamw8bit updates its 8-bit state on the CPU only, not with --device cuda");
  EXPECT_EQ(parse_error({"--optimizer", "adam8bit", "--fsdp"}),
            "--optimizer adam8bit keeps block-wise state that --fsdp cannot shard; use adam or adamw");
  EXPECT_EQ(parse_error({"--schedule", "step"}), "--schedule: unknown schedule 'step' (expected none, cosine or onecycle)");
  EXPECT_EQ(parse_error({"--lr", "0"}), "--lr must be positive and finite, got 0");
  EXPECT_EQ(parse_error({"--momentum", "1.5"}), "--momentum must be in [0, 1), got 1.5");
  EXPECT_EQ(parse_error({"--device", "tpu"}), "--device: unknown device 'tpu' (expected cpu, cuda or cuda:N)");
  EXPECT_EQ(parse_error({"--workers", "-2"}),
            "--workers must be non-negative (0: load batches on the training thread), got -2");
  EXPECT_NE(parse_error({"--eval-only"}).find("--eval-only needs the model to evaluate"), std::string::npos);
  EXPECT_NE(parse_error({"--weights", "w.safetensors"}).find("--weights only goes with --eval-only"),
            std::string::npos);
}

// Infinities, NaN and integers beyond their type are refused, naming the
// flag, rather than clamped, wrapped or trained with.
TEST(LenetOptions, InfinitiesAndOutOfRangeNumbersAreNamed) {
  EXPECT_EQ(parse_error({"--lr", "inf"}), "--lr must be positive and finite, got inf");
  EXPECT_EQ(parse_error({"--lr", "nan"}), "--lr must be positive and finite, got nan");
  EXPECT_EQ(parse_error({"--weight-decay", "inf"}), "--weight-decay must be non-negative and finite, got inf");
  EXPECT_EQ(parse_error({"--epochs", "99999999999999999999"}),
            "--epochs: 99999999999999999999 is out of range (-9223372036854775808 to 9223372036854775807)");
  EXPECT_EQ(parse_error({"--epochs", "9223372036854775807"}),
            "--epochs must be at most 1000000000, got 9223372036854775807");
  EXPECT_EQ(parse_error({"--seed", "-1"}), "--seed: '-1' is not a non-negative integer");
  EXPECT_EQ(parse_error({"--seed", "18446744073709551616"}),
            "--seed: 18446744073709551616 is out of range (0 to 18446744073709551615)");
  EXPECT_EQ(parse_error({"--batch-size", "0x10"}), "--batch-size: '0x10' is not an integer");
  EXPECT_EQ(parse_error({"--threads", "3000000000"}),
            "--threads: 3000000000 is out of range (-2147483648 to 2147483647)");
  for (const char* flag : {"--timeout", "--heartbeat-timeout"}) {
    for (const char* value : {"0", "-1", "inf", "nan"}) {
      EXPECT_EQ(parse_error({"--ddp", flag, value}).rfind(std::string(flag) + " must be a positive number of seconds", 0),
                0u)
          << flag << " " << value << ": " << parse_error({"--ddp", flag, value});
    }
    EXPECT_EQ(parse_error({flag, "5"}), std::string(flag) + " only goes with --ddp, --fsdp or --pp");
  }
  // The largest seed is a seed.
  CommandLine cl = parse_command_line(std::vector<std::string>{"kiln-lenet", "--seed", "18446744073709551615"});
  EXPECT_EQ(cl.options->seed, 18446744073709551615u);
}

TEST(LenetProgram, HelpDocumentsEveryFlag) {
  TempDir dir("kiln-lenet-help");
  testing::ProcessResult r = testing::run_kiln_lenet({"--help"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--data", "--epochs", "--batch-size", "--lr", "--momentum", "--weight-decay", "--optimizer",
                           "--schedule", "--augment", "--threads", "--device", "--seed", "--workers", "--save",
                           "--resume", "--eval-only", "--log", "--plot", "--timeout", "--heartbeat-timeout"}) {
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

// The files in `dir` whose names hold ".tmp." (a save's temporary file).
std::vector<std::string> temporary_files(const TempDir& dir) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp") != std::string::npos || name.find(".probe") != std::string::npos) found.push_back(name);
  }
  return found;
}

// A second Ctrl-C while the checkpoint is being written ends the process as
// a Ctrl-C does, and takes the temporary file with it. The save is held in
// the middle: its temporary file is a FIFO that the test opens but does not
// read, so the write blocks once the pipe is full (a checkpoint is larger).
TEST(LenetProgram, SecondSigintDuringASaveLeavesNoTemporaryFile) {
  TempDir dir("kiln-lenet-sigint-twice");
  testing::write_synthetic_cifar(dir.path());
  const std::string ckpt = dir / "run.ckpt";
  std::string fifo;
  int reader = -1;
  bool second_sent = false;
  testing::ProcessResult r = testing::run_kiln_lenet(
      {"--data", dir.path().string(), "--epochs", "1000", "--batch-size", "20", "--threads", "1", "--save", ckpt},
      dir / "err.txt", [&](const std::string& line, pid_t pid) {
        if (!fifo.empty() || line.find("step") == std::string::npos) return;
        fifo = ckpt + ".tmp." + std::to_string(pid);
        ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
        reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
        ASSERT_GE(reader, 0);
        ::kill(pid, SIGINT);
        // Bytes in the pipe: the save has begun; it now waits for a reader.
        pollfd ready{reader, POLLIN, 0};
        ASSERT_EQ(::poll(&ready, 1, 60'000), 1);
        ::kill(pid, SIGINT);
        second_sent = true;
      });
  if (reader >= 0) ::close(reader);
  ASSERT_TRUE(second_sent) << r.out << r.err;
  EXPECT_EQ(r.signal, SIGINT) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(fifo));
  EXPECT_FALSE(std::filesystem::exists(ckpt));  // the interrupted save did not half-replace it
  EXPECT_TRUE(temporary_files(dir).empty());
}

// A checkpoint that outgrows the file size limit (ulimit -f) is an error
// naming the file; the process survives SIGXFSZ to remove the temporary file.
TEST(LenetProgram, FileSizeLimitFailsTheSaveWithoutATemporaryFile) {
  TempDir dir("kiln-lenet-fsize");
  testing::write_synthetic_cifar(dir.path());
  const std::string ckpt = dir / "run.ckpt";
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit limited = saved;
  limited.rlim_cur = 64 * 1024;  // the child inherits it; a LeNet checkpoint is over 500 KB
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  testing::ProcessResult r = testing::run_kiln_lenet(
      {"--data", dir.path().string(), "--epochs", "1", "--batch-size", "20", "--threads", "1", "--save", ckpt},
      dir / "err.txt");
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("kiln-lenet: save_safetensors: cannot write '" + ckpt + ".tmp."), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  EXPECT_TRUE(temporary_files(dir).empty());
}

// An unwritable --plot is refused before training starts.
TEST(LenetProgram, UnwritablePlotIsRefusedBeforeTraining) {
  TempDir dir("kiln-lenet-plot-path");
  testing::write_synthetic_cifar(dir.path());
  const std::string plot = dir / "no/such/folder/run.svg";
  testing::ProcessResult r = testing::run_kiln_lenet(
      {"--data", dir.path().string(), "--epochs", "1", "--save", dir / "run.ckpt", "--plot", plot}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "kiln-lenet: --plot '" + plot + "': cannot create files beside it (No such file or directory)\n");
  EXPECT_EQ(r.out.find("step"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "run.ckpt"));
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
