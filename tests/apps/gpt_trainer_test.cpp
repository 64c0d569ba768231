// kiln-gpt train and sample as library calls (apps/gpt/trainer.h,
// sampler.h) on a small text: outputs, exact resume, refusals, sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "apps/gpt/history.h"
#include "apps/gpt/sampler.h"
#include "apps/gpt/trainer.h"
#include "gpt_test_data.h"

namespace kiln::apps::gpt {
namespace {

using testing::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

// nanoGPT's get_lr by hand: lr 1, min_lr 0.1, 4 warmup steps of 14.
TEST(GptSchedule, LinearWarmupThenCosineToMinLr) {
  TrainOptions o;
  o.lr = 1.0, o.min_lr = 0.1, o.warmup_steps = 4, o.steps = 14;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 1.0 / 5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 3), 4.0 / 5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 4), 1.0);              // cos(0)
  EXPECT_DOUBLE_EQ(learning_rate(o, 9), 0.1 + 0.5 * 0.9);  // half way: cos(pi / 2) = 0
  EXPECT_NEAR(learning_rate(o, 6), 0.1 + 0.45 * (1 + std::cos(M_PI * 0.2)), 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(o, 14), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 20), 0.1);
  o.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 1.0);
}

TEST(GptTrainer, TinyRunLogsChartsSavesAndLearns) {
  TempDir dir("kiln-gpt-tiny");
  TrainOptions o = testing::tiny_run(dir);
  o.steps = 30;
  o.eval_interval = 10;
  o.save = dir / "run.ckpt";
  o.log = dir / "run.jsonl";
  o.plot = dir / "run.svg";
  std::ostringstream out, err;
  TrainingResult r = run_training(o, {.out = &out, .err = &err});
  EXPECT_EQ(r.status, RunStatus::Finished);
  EXPECT_EQ(r.step, 30);
  ASSERT_EQ(r.history.size(), 4u) << out.str();  // steps 0, 10, 20, 30
  for (size_t i = 0; i < r.history.size(); ++i) EXPECT_EQ(r.history[i].step, static_cast<int64_t>(10 * i));
  // The initial model knows nothing of ~30 characters (ln 30 = 3.4); 30 steps learn a lot.
  EXPECT_GT(r.history.front().val_loss, 3.0);
  EXPECT_LT(r.history.back().val_loss, r.history.front().val_loss - 0.8) << out.str();
  EXPECT_DOUBLE_EQ(r.history[1].lr, learning_rate(o, 9));
  EXPECT_GT(r.history[1].tokens_per_second, 0);
  EXPECT_TRUE(err.str().empty()) << err.str();

  const std::vector<std::string> lines = testing::read_lines(o.log);
  ASSERT_EQ(lines.size(), r.history.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const EvalRecord rec = eval_record_from_json(lines[i]);
    EXPECT_EQ(rec.step, r.history[i].step);
    EXPECT_EQ(rec.val_loss, r.history[i].val_loss);
    EXPECT_EQ(rec.train_loss, r.history[i].train_loss);
  }
  const std::string svg = testing::read_text(o.plot);
  EXPECT_NE(svg.find("validation loss"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.plot + ".tmp"));
  EXPECT_NE(out.str().find("step 30/30  train loss"), std::string::npos) << out.str();

  const CheckpointModel saved = read_checkpoint_model(o.save);
  EXPECT_EQ(saved.config.n_layer, 1);
  EXPECT_EQ(saved.config.n_embd, 16);
  EXPECT_EQ(saved.config.vocab_size, r.tokenizer->vocab_size());
  EXPECT_EQ(saved.tokenizer->encode("the cat sees the moon."), r.tokenizer->encode("the cat sees the moon."));
  nn::GPT loaded(saved.config);
  loaded.load_state_dict(saved.weights);
  EXPECT_TRUE(testing::same_parameters(loaded, *r.model));
}

// Stops after `stop_at` steps, resumes, and compares with a run that never
// stopped: the same parameters bit for bit, the same evaluations.
void check_resume(TrainOptions o, int64_t stop_at) {
  TempDir dir("kiln-gpt-resume-" + std::to_string(stop_at));
  o.save = dir / "run.ckpt";
  std::ostringstream out;
  TrainingResult whole = run_training(o, {.out = &out});
  o.log = dir / "run.jsonl";
  TrainingResult first = run_training(o, {.out = &out, .should_stop = [&](int64_t step) { return step == stop_at; }});
  ASSERT_EQ(first.status, RunStatus::Interrupted);
  ASSERT_EQ(first.step, stop_at);
  TrainOptions again = o;
  again.resume = o.save;
  again.threads = 1;
  std::ostringstream resumed_out;
  TrainingResult second = run_training(again, {.out = &resumed_out});
  EXPECT_NE(resumed_out.str().find("resuming " + o.save + " at step " + std::to_string(stop_at)), std::string::npos)
      << resumed_out.str();
  ASSERT_EQ(second.status, RunStatus::Finished);
  EXPECT_TRUE(testing::same_parameters(*second.model, *whole.model));
  ASSERT_EQ(second.history.size(), whole.history.size());
  for (size_t i = 0; i < whole.history.size(); ++i) {
    EXPECT_EQ(second.history[i].step, whole.history[i].step) << i;
    EXPECT_EQ(second.history[i].train_loss, whole.history[i].train_loss) << i;
    EXPECT_EQ(second.history[i].val_loss, whole.history[i].val_loss) << i;
    EXPECT_EQ(second.history[i].lr, whole.history[i].lr) << i;
  }
  // The log continues the interrupted run's: one line per evaluation.
  EXPECT_EQ(testing::read_lines(o.log).size(), whole.history.size());
}

// With dropout (the generator's state travels in the checkpoint) and a BPE
// tokenizer (its merges do), between two evaluations.
TEST(GptTrainer, ResumeBetweenEvaluationsEqualsUninterrupted) {
  TempDir dir("kiln-gpt-resume-text");
  TrainOptions o = testing::tiny_run(dir);
  o.dropout = 0.1;
  o.tokenizer = "bpe";
  o.vocab_size = 300;
  check_resume(o, 6);
}

// At an evaluation's step, whose evaluation the resumed run makes.
TEST(GptTrainer, ResumeAtAnEvaluationStepEqualsUninterrupted) {
  TempDir dir("kiln-gpt-resume-text");
  TrainOptions o = testing::tiny_run(dir);
  o.dropout = 0.1;
  check_resume(o, 8);
}

TEST(GptTrainer, ResumeWithAnotherRecipeOrTextIsRefused) {
  TempDir dir("kiln-gpt-refuse");
  TrainOptions o = testing::tiny_run(dir);
  o.save = dir / "run.ckpt";
  std::ostringstream out;
  run_training(o, {.out = &out, .should_stop = [](int64_t step) { return step == 2; }});
  TrainOptions other = o;
  other.resume = o.save;
  other.lr = 5e-3;
  const std::string m = error_of([&] { run_training(other, {.out = &out}); });
  EXPECT_NE(m.find("--resume '" + o.save + "': the checkpoint was made with tokenizer char, 1 layers"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("AdamW lr 0.01 "), std::string::npos) << m;
  EXPECT_NE(m.find("AdamW lr 0.005 "), std::string::npos) << m;

  other = o;
  other.resume = o.save;
  other.data = dir / "other.txt";
  std::ofstream(other.data) << testing::small_text() << "the end.\n";
  const std::string t = error_of([&] { run_training(other, {.out = &out}); });
  EXPECT_NE(t.find("--resume '" + o.save + "': the checkpoint was trained on another text"), std::string::npos) << t;

  other = o;
  other.resume = dir / "text.txt";  // not a checkpoint at all
  const std::string n = error_of([&] { run_training(other, {.out = &out}); });
  EXPECT_NE(n.find(dir / "text.txt"), std::string::npos) << n;
}

TEST(GptTrainer, BadTextAndOutputsAreNamedBeforeTraining) {
  TempDir dir("kiln-gpt-bad-text");
  TrainOptions o = testing::tiny_run(dir);
  std::ostringstream out;
  o.data = dir / "missing.txt";
  EXPECT_NE(error_of([&] { run_training(o, {.out = &out}); }).find("--data '" + o.data + "'"), std::string::npos);
  o.data = dir / "latin1.txt";
  std::ofstream(o.data) << "caf\xe9 au lait\n";
  const std::string latin1 = error_of([&] { run_training(o, {.out = &out}); });
  EXPECT_NE(latin1.find("--data '" + o.data + "'"), std::string::npos) << latin1;
  EXPECT_NE(latin1.find("byte 3 (0xe9)"), std::string::npos) << latin1;
  o.data = dir / "short.txt";
  std::ofstream(o.data) << "far too short for a block of sixteen characters.\n";
  const std::string short_text = error_of([&] { run_training(o, {.out = &out}); });
  EXPECT_NE(short_text.find("needs at least --block-size + 1 = 17"), std::string::npos) << short_text;
  o = testing::tiny_run(dir);
  o.plot = dir / "no/such/folder/run.svg";
  EXPECT_EQ(error_of([&] { run_training(o, {.out = &out}); }),
            "--plot '" + o.plot + "': cannot create files beside it (No such file or directory)");
  EXPECT_TRUE(out.str().empty()) << out.str();
}

// The same run on a GPU and on the CPU: the same evaluations up to float32
// rounding in other orders.
TEST(GptTrainer, CudaTrainsAsTheCpuDoes) {
  if (!testing::gpu_present()) GTEST_SKIP() << "no CUDA device: the CUDA run of kiln-gpt is not compared";
  TempDir dir("kiln-gpt-cuda");
  TrainOptions o = testing::tiny_run(dir);
  std::ostringstream out;
  TrainingResult cpu = run_training(o, {.out = &out});
  o.device = "cuda";
  TrainingResult gpu = run_training(o, {.out = &out});
  ASSERT_EQ(gpu.history.size(), cpu.history.size());
  for (size_t i = 0; i < cpu.history.size(); ++i) {
    EXPECT_NEAR(gpu.history[i].val_loss, cpu.history[i].val_loss, 1e-3 * cpu.history[i].val_loss) << i;
  }
  o.amp = true;  // float16 with loss scaling
  TrainingResult amp = run_training(o, {.out = &out});
  EXPECT_NEAR(amp.history.back().val_loss, cpu.history.back().val_loss, 0.05);
}

TEST(GptSample, SameSeedSameTextAndThePromptFirst) {
  TempDir dir("kiln-gpt-sample");
  TrainOptions o = testing::tiny_run(dir);
  o.steps = 30;
  o.save = dir / "run.ckpt";
  std::ostringstream out;
  run_training(o, {.out = &out});
  SampleOptions s;
  s.checkpoint = o.save;
  s.prompt = "the cat ";
  s.max_new_tokens = 40;
  s.num_samples = 2;
  s.seed = 5;
  s.threads = 1;
  std::ostringstream printed;
  const std::vector<std::string> a = run_sampling(s, printed);
  const std::vector<std::string> b = run_sampling(s, out);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], a[1]);  // the second sample continues the generator's stream
  for (const std::string& text : a) {
    EXPECT_EQ(text.rfind("the cat ", 0), 0u) << text;
    EXPECT_EQ(text.size(), s.prompt.size() + 40u) << text;  // one character per token
  }
  EXPECT_EQ(printed.str(), a[0] + "\n---------------\n" + a[1] + "\n");
  s.seed = 6;
  EXPECT_NE(run_sampling(s, out), a);
  // Greedy decoding draws nothing: every seed gives the same text.
  s.temperature = 0;
  const std::vector<std::string> greedy = run_sampling(s, out);
  s.seed = 7;
  EXPECT_EQ(run_sampling(s, out), greedy);
  EXPECT_EQ(greedy[0], greedy[1]);
}

TEST(GptSample, BadPromptOrCheckpointIsNamed) {
  TempDir dir("kiln-gpt-sample-bad");
  TrainOptions o = testing::tiny_run(dir);
  o.steps = 2;
  o.save = dir / "run.ckpt";
  std::ostringstream out;
  run_training(o, {.out = &out});
  SampleOptions s;
  s.checkpoint = o.save;
  s.prompt = "the cat \xe2\x82\xac";  // a euro sign, not in the text
  const std::string m = error_of([&] { run_sampling(s, out); });
  EXPECT_EQ(m.rfind("--prompt: ", 0), 0u) << m;
  EXPECT_NE(m.find("U+20AC"), std::string::npos) << m;
  s.prompt = "the";
  s.checkpoint = dir / "text.txt";
  const std::string c = error_of([&] { run_sampling(s, out); });
  EXPECT_NE(c.find(dir / "text.txt"), std::string::npos) << c;
}

}  // namespace
}  // namespace kiln::apps::gpt
