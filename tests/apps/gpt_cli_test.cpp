// kiln-gpt as a program and its command line: --help, the flags, their
// errors and exit codes, and Ctrl-C (a real SIGINT to a child process).
#include <gtest/gtest.h>

#include "apps/gpt/options.h"
#include "gpt_test_data.h"

namespace kiln::apps::gpt {
namespace {

using testing::TempDir;
using testing::parse_error;

TEST(GptOptions, DefaultsAreTheRecipe) {
  CommandLine cl = parse_command_line(std::vector<std::string>{"kiln-gpt", "train"});
  ASSERT_TRUE(cl.train.has_value());
  EXPECT_FALSE(cl.sample.has_value());
  const TrainOptions& o = *cl.train;
  EXPECT_EQ(o.data, "");  // the fortunes corpus
  EXPECT_EQ(o.tokenizer, "char");
  EXPECT_EQ(o.n_layer, 4);
  EXPECT_EQ(o.n_head, 4);
  EXPECT_EQ(o.n_embd, 128);
  EXPECT_EQ(o.block_size, 128);
  EXPECT_EQ(o.dropout, 0.0);
  EXPECT_TRUE(o.bias);
  EXPECT_EQ(o.batch_size, TrainOptions{}.batch_size);
  EXPECT_EQ(o.steps, TrainOptions{}.steps);
  EXPECT_EQ(o.lr, 6e-3);
  EXPECT_EQ(o.seed, 1337u);
}

TEST(GptOptions, TrainAndSampleFlagsAreRead) {
  CommandLine cl = parse_command_line(std::vector<std::string>{"kiln-gpt",
                                                               "train",
                                                               "--data",
                                                               "t.txt",
                                                               "--tokenizer",
                                                               "bpe",
                                                               "--vocab-size",
                                                               "1000",
                                                               "--layers",
                                                               "6",
                                                               "--heads",
                                                               "6",
                                                               "--width",
                                                               "384",
                                                               "--block-size",
                                                               "256",
                                                               "--dropout",
                                                               "0.2",
                                                               "--no-bias",
                                                               "--batch-size",
                                                               "64",
                                                               "--steps",
                                                               "5000",
                                                               "--lr",
                                                               "1e-3",
                                                               "--min-lr",
                                                               "1e-4",
                                                               "--warmup-steps",
                                                               "100",
                                                               "--weight-decay",
                                                               "0.2",
                                                               "--beta1",
                                                               "0.8",
                                                               "--beta2",
                                                               "0.95",
                                                               "--grad-clip",
                                                               "0",
                                                               "--eval-interval",
                                                               "250",
                                                               "--eval-batches",
                                                               "200",
                                                               "--seed",
                                                               "7",
                                                               "--threads",
                                                               "2",
                                                               "--device",
                                                               "cuda:1",
                                                               "--amp",
                                                               "--save",
                                                               "a.ckpt",
                                                               "--resume",
                                                               "b.ckpt",
                                                               "--log",
                                                               "a.jsonl",
                                                               "--plot",
                                                               "a.svg"});
  ASSERT_TRUE(cl.train.has_value());
  const TrainOptions& o = *cl.train;
  EXPECT_EQ(o.data, "t.txt");
  EXPECT_EQ(o.tokenizer, "bpe");
  EXPECT_EQ(o.vocab_size, 1000);
  EXPECT_EQ(o.n_layer, 6);
  EXPECT_EQ(o.n_head, 6);
  EXPECT_EQ(o.n_embd, 384);
  EXPECT_EQ(o.block_size, 256);
  EXPECT_EQ(o.dropout, 0.2);
  EXPECT_FALSE(o.bias);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.steps, 5000);
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.min_lr, 1e-4);
  EXPECT_EQ(o.warmup_steps, 100);
  EXPECT_EQ(o.weight_decay, 0.2);
  EXPECT_EQ(o.beta1, 0.8);
  EXPECT_EQ(o.beta2, 0.95);
  EXPECT_EQ(o.grad_clip, 0.0);
  EXPECT_EQ(o.eval_interval, 250);
  EXPECT_EQ(o.eval_batches, 200);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.device, "cuda:1");
  EXPECT_TRUE(o.amp);
  EXPECT_EQ(o.save, "a.ckpt");
  EXPECT_EQ(o.resume, "b.ckpt");
  EXPECT_EQ(o.log, "a.jsonl");
  EXPECT_EQ(o.plot, "a.svg");

  cl = parse_command_line(std::vector<std::string>{
      "kiln-gpt",      "sample", "--checkpoint", "a.ckpt", "--prompt",      "Q: ", "--max-new-tokens", "50",
      "--temperature", "0.5",    "--top-k",      "10",     "--num-samples", "3",   "--seed",           "9",
      "--device",      "cuda",   "--threads",    "1"});
  ASSERT_TRUE(cl.sample.has_value());
  EXPECT_FALSE(cl.train.has_value());
  const SampleOptions& s = *cl.sample;
  EXPECT_EQ(s.checkpoint, "a.ckpt");
  EXPECT_EQ(s.prompt, "Q: ");
  EXPECT_EQ(s.max_new_tokens, 50);
  EXPECT_EQ(s.temperature, 0.5);
  EXPECT_EQ(s.top_k, 10);
  EXPECT_EQ(s.num_samples, 3);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(s.device, "cuda");
  EXPECT_EQ(s.threads, 1);
}

TEST(GptOptions, BadValuesNameTheFlag) {
  EXPECT_EQ(parse_error({"train", "--tokenizer", "word"}),
            "--tokenizer: unknown tokenizer 'word' (expected char or bpe)");
  EXPECT_EQ(parse_error({"train", "--tokenizer", "bpe", "--vocab-size", "100"}),
            "--vocab-size must be from 256 (the bytes) to 1048576, got 100");
  EXPECT_NE(parse_error({"train", "--vocab-size", "1000"}).find("--vocab-size only goes with --tokenizer bpe"),
            std::string::npos);
  EXPECT_EQ(parse_error({"train", "--width", "30"}), "--width must be a positive multiple of --heads (4), got 30");
  EXPECT_EQ(parse_error({"train", "--layers", "0"}), "--layers must be at least 1, got 0");
  EXPECT_EQ(parse_error({"train", "--dropout", "1"}), "--dropout must be in [0, 1), got 1");
  EXPECT_EQ(parse_error({"train", "--steps", "-5"}), "--steps must be from 1 to 1000000000, got -5");
  EXPECT_EQ(parse_error({"train", "--steps", "1e3"}), "--steps: '1e3' is not an integer");
  EXPECT_EQ(parse_error({"train", "--lr", "nan"}), "--lr must be positive and finite, got nan");
  EXPECT_EQ(parse_error({"train", "--min-lr", "0.1"}), "--min-lr must be in [0, --lr = 0.006], got 0.1");
  EXPECT_EQ(parse_error({"train", "--steps", "10", "--warmup-steps", "20"}),
            "--warmup-steps must be from 0 to --steps (10), got 20");
  EXPECT_EQ(parse_error({"train", "--beta2", "1"}), "--beta2 must be in [0, 1), got 1");
  EXPECT_EQ(parse_error({"train", "--eval-interval", "0"}), "--eval-interval must be at least 1, got 0");
  EXPECT_EQ(parse_error({"train", "--seed", "-1"}), "--seed: '-1' is not a non-negative integer");
  EXPECT_EQ(parse_error({"train", "--device", "tpu"}), "--device: unknown device 'tpu' (expected cpu, cuda or cuda:N)");
  EXPECT_EQ(parse_error({"sample", "--checkpoint", "a", "--temperature", "-1"}),
            "--temperature must be non-negative and finite (0: greedy), got -1");
  EXPECT_EQ(parse_error({"sample", "--checkpoint", "a", "--top-k", "-2"}),
            "--top-k must be non-negative (0: every token), got -2");
  EXPECT_EQ(parse_error({"sample", "--checkpoint", "a", "--prompt", ""}), "--prompt must hold at least one character");
  EXPECT_EQ(parse_error({"sample", "--checkpoint", "a", "--num-samples", "0"}),
            "--num-samples must be at least 1, got 0");
}

TEST(GptProgram, HelpListsTheSubcommandsAndTheRecipe) {
  TempDir dir("kiln-gpt-help");
  testing::ProcessResult top = testing::run_kiln_gpt({"--help"}, dir / "err.txt");
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("train"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("sample"), std::string::npos) << top.out;
  testing::ProcessResult train = testing::run_kiln_gpt({"train", "--help"}, dir / "err.txt");
  EXPECT_EQ(train.exit_code, 0) << train.err;
  for (const char* flag : {"--data", "--tokenizer TEXT=char", "--layers INT=4", "--heads INT=4", "--width INT=128",
                           "--block-size INT=128", "--dropout", "--bias", "--steps", "--lr", "--eval-interval",
                           "--device", "--amp", "--save", "--resume", "--log", "--plot"}) {
    EXPECT_NE(train.out.find(flag), std::string::npos) << flag;
  }
  testing::ProcessResult sample = testing::run_kiln_gpt({"sample", "--help"}, dir / "err.txt");
  EXPECT_EQ(sample.exit_code, 0) << sample.err;
  for (const char* flag : {"--checkpoint", "--prompt", "--max-new-tokens", "--temperature", "--top-k", "--seed"}) {
    EXPECT_NE(sample.out.find(flag), std::string::npos) << flag;
  }
}

TEST(GptProgram, ParseErrorsAndBadValuesExitNonZeroSayingWhy) {
  TempDir dir("kiln-gpt-errors");
  testing::ProcessResult none = testing::run_kiln_gpt({}, dir / "err.txt");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("A subcommand is required"), std::string::npos) << none.err;
  testing::ProcessResult unknown = testing::run_kiln_gpt({"train", "--frobnicate"}, dir / "err.txt");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("--frobnicate"), std::string::npos) << unknown.err;
  testing::ProcessResult no_checkpoint = testing::run_kiln_gpt({"sample"}, dir / "err.txt");
  EXPECT_NE(no_checkpoint.exit_code, 0);
  EXPECT_NE(no_checkpoint.err.find("--checkpoint is required"), std::string::npos) << no_checkpoint.err;
  testing::ProcessResult bad = testing::run_kiln_gpt({"train", "--width", "30"}, dir / "err.txt");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err, "kiln-gpt: --width must be a positive multiple of --heads (4), got 30\n");
  const std::string missing = dir / "missing.ckpt";
  testing::ProcessResult no_file = testing::run_kiln_gpt({"sample", "--checkpoint", missing}, dir / "err.txt");
  EXPECT_EQ(no_file.exit_code, 1);
  EXPECT_EQ(no_file.err.rfind("kiln-gpt: ", 0), 0u) << no_file.err;
  EXPECT_NE(no_file.err.find(missing), std::string::npos) << no_file.err;
}

// Ctrl-C with --save: the step in progress finishes, the checkpoint is
// written, the program exits with 130; --resume then completes the run and
// sample prints text from it.
TEST(GptProgram, SigintSavesCheckpointAndResumeFinishes) {
  TempDir dir("kiln-gpt-sigint");
  const std::string text = testing::write_small_text(dir / "text.txt");
  const std::string ckpt = dir / "run.ckpt";
  std::vector<std::string> args = {"train",
                                   "--data",
                                   text,
                                   "--layers",
                                   "1",
                                   "--heads",
                                   "2",
                                   "--width",
                                   "16",
                                   "--block-size",
                                   "16",
                                   "--batch-size",
                                   "4",
                                   "--steps",
                                   "400",
                                   "--warmup-steps",
                                   "2",
                                   "--eval-interval",
                                   "100",
                                   "--eval-batches",
                                   "2",
                                   "--threads",
                                   "1",
                                   "--save",
                                   ckpt,
                                   "--log",
                                   dir / "run.jsonl"};
  bool sent = false;
  testing::ProcessResult r = testing::run_kiln_gpt(args, dir / "err.txt", [&](const std::string& line, pid_t pid) {
    if (!sent && line.rfind("train  step", 0) == 0) {  // the first progress line
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
  testing::ProcessResult resumed = testing::run_kiln_gpt(args, dir / "err.txt");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resuming " + ckpt), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("step 400/400  train loss"), std::string::npos) << resumed.out;
  EXPECT_EQ(testing::read_lines(dir / "run.jsonl").size(), 5u);  // steps 0, 100, 200, 300, 400

  testing::ProcessResult sample = testing::run_kiln_gpt(
      {"sample", "--checkpoint", ckpt, "--prompt", "the cat", "--max-new-tokens", "20", "--seed", "3"},
      dir / "err.txt");
  EXPECT_EQ(sample.exit_code, 0) << sample.err;
  EXPECT_EQ(sample.out.rfind("the cat", 0), 0u) << sample.out;
  EXPECT_EQ(sample.out.size(), 7u + 20u + 1u) << sample.out;
}

}  // namespace
}  // namespace kiln::apps::gpt
