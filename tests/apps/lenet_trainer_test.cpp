// kiln-lenet's training run, driven in-process through run_training
// (apps/lenet/trainer.h) on a tiny synthetic CIFAR-10 folder.
#include <gtest/gtest.h>

#include <sstream>

#include "apps/lenet/trainer.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet {
namespace {

using testing::gpu_present;
using testing::TempDir;

// The trainer's runs load their batches on two worker threads.
constexpr int kWorkers = 2;

TEST(LenetTrainer, TwoEpochsLogPlotCheckpointAndLearn) {
  TempDir dir("kiln-lenet-two-epochs");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.log = dir / "run.jsonl";
  o.plot = dir / "run.svg";
  o.save = dir / "run.ckpt";
  std::ostringstream out;
  TrainingResult r = run_training(o, {.out = &out});

  EXPECT_EQ(r.status, RunStatus::Finished);
  EXPECT_EQ(r.global_step, 20);
  ASSERT_EQ(r.history.size(), 2u);
  // From chance (ln 10 = 2.30) down: the classes differ in brightness.
  EXPECT_LT(r.history[1].train_loss, r.history[0].train_loss);
  EXPECT_LT(r.history[1].test_loss, 2.0);

  std::vector<std::string> lines = testing::read_lines(o.log);
  ASSERT_EQ(lines.size(), 2u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EpochRecord rec = epoch_record_from_json(lines[i]);  // throws on a missing field
    EXPECT_EQ(rec.epoch, static_cast<int64_t>(i + 1));
    EXPECT_DOUBLE_EQ(rec.train_loss, r.history[i].train_loss);
    EXPECT_DOUBLE_EQ(rec.test_accuracy, r.history[i].test_accuracy);
    EXPECT_GT(rec.images_per_second, 0);
    EXPECT_GT(rec.seconds, 0);
    // The run's wall clock: at least the training time of the epochs so far.
    EXPECT_GE(rec.elapsed_seconds, r.history[0].seconds + (i > 0 ? r.history[1].seconds : 0.0));
    if (i > 0) {
      EXPECT_GT(rec.elapsed_seconds, epoch_record_from_json(lines[0]).elapsed_seconds);
    }
  }
  EXPECT_NE(lines[0].find("\"images_per_second\""), std::string::npos);

  std::string svg = testing::read_text(o.plot);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("test accuracy"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.plot + ".tmp"));
  EXPECT_TRUE(std::filesystem::exists(o.save));

  // Progress lines (not a terminal: plain lines), epoch summaries, the table.
  const std::string text = out.str();
  EXPECT_NE(text.find("epoch 1/2  step 10/10"), std::string::npos) << text;
  EXPECT_NE(text.find("epoch 2/2  train loss"), std::string::npos) << text;
  EXPECT_NE(text.find("airplane"), std::string::npos) << text;
  EXPECT_NE(text.find("truck"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);

  // A second run from scratch logs alone: the old lines are gone.
  o.epochs = 1;
  o.save.clear();
  run_training(o, {.out = &out});
  EXPECT_EQ(testing::read_lines(o.log).size(), 1u);
}

void expect_same_parameters(nn::Module& a, nn::Module& b) {
  TensorDict da = a.state_dict(), db = b.state_dict();
  ASSERT_EQ(da.keys(), db.keys());
  for (const auto& [name, t] : da) {
    Tensor u = t.contiguous(), v = db.at(name).contiguous();
    ASSERT_EQ(u.numel(), v.numel()) << name;
    EXPECT_EQ(std::memcmp(u.data_ptr(), v.data_ptr(), u.nbytes()), 0) << name << " differs";
  }
}

// Note [Exact resume]: stopping after `stop_at` steps and resuming gives the
// parameters and losses of the run that never stopped.
void check_resume(int64_t stop_at, bool augment, OptimizerKind optimizer) {
  TempDir dir("kiln-lenet-resume-" + std::to_string(stop_at));
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.augment = augment;
  o.optimizer = optimizer;
  if (optimizer != OptimizerKind::SGD) o.lr = 1e-3;
  std::ostringstream sink;
  TrainingResult whole = run_training(o, {.out = &sink});

  o.save = dir / "run.ckpt";
  o.log = dir / "run.jsonl";
  TrainingResult first =
      run_training(o, {.out = &sink, .should_stop = [&](int64_t step) { return step == stop_at; }});
  ASSERT_EQ(first.status, RunStatus::Interrupted);
  EXPECT_EQ(first.global_step, stop_at);
  EXPECT_EQ(first.epoch, (stop_at - 1) / 10);

  o.resume = o.save;
  TrainingResult second = run_training(o, {.out = &sink});
  ASSERT_EQ(second.status, RunStatus::Finished);
  EXPECT_EQ(second.global_step, 20);
  expect_same_parameters(*whole.model, *second.model);
  ASSERT_EQ(second.history.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(second.history[e].train_loss, whole.history[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(second.history[e].test_loss, whole.history[e].test_loss) << "epoch " << e + 1;
  }
  // The log gets each epoch once, whichever run finished it.
  EXPECT_EQ(testing::read_lines(o.log).size(), 2u);
}

TEST(LenetTrainer, ResumeMidEpochEqualsUninterrupted) { check_resume(13, true, OptimizerKind::SGD); }
TEST(LenetTrainer, ResumeInFirstEpochWithoutAugmentation) { check_resume(4, false, OptimizerKind::SGD); }
TEST(LenetTrainer, ResumeAtEpochEndWithAdamW) { check_resume(10, true, OptimizerKind::AdamW); }

TEST(LenetTrainer, EvalOnlyFromCheckpointAndWeights) {
  TempDir dir("kiln-lenet-eval");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.save = dir / "run.ckpt";
  std::ostringstream sink;
  TrainingResult trained = run_training(o, {.out = &sink});
  save_safetensors(dir / "weights.safetensors", trained.model->state_dict());

  TrainerOptions e;
  e.data = o.data;
  e.eval_only = true;
  e.resume = o.save;
  std::ostringstream out;
  TrainingResult evaluated = run_training(e, {.out = &out});
  EXPECT_EQ(evaluated.status, RunStatus::Evaluated);
  EXPECT_EQ(evaluated.evaluation.images, 100);
  EXPECT_DOUBLE_EQ(evaluated.evaluation.accuracy, trained.evaluation.accuracy);
  EXPECT_NEAR(evaluated.evaluation.loss, trained.evaluation.loss, 1e-6);
  EXPECT_NE(out.str().find("correct/images"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("all"), std::string::npos);

  e.resume.clear();
  e.weights = dir / "weights.safetensors";
  TrainingResult from_weights = run_training(e, {.out = &sink});
  EXPECT_DOUBLE_EQ(from_weights.evaluation.accuracy, trained.evaluation.accuracy);
  // Per class: 25 test images in each of the first four classes, none in the rest.
  EXPECT_EQ(from_weights.evaluation.total[0], 25);
  EXPECT_EQ(from_weights.evaluation.total[9], 0);
}

TEST(LenetTrainer, ResumeWithAnotherRecipeIsRefused) {
  TempDir dir("kiln-lenet-recipe");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.epochs = 1;
  o.save = dir / "run.ckpt";
  std::ostringstream sink;
  run_training(o, {.out = &sink});
  o.resume = o.save;
  o.epochs = 3;
  try {
    run_training(o, {.out = &sink});
    FAIL() << "expected kiln::Error";
  } catch (const Error& err) {
    const std::string m = err.message();
    EXPECT_NE(m.find("the checkpoint was made with epochs 1,"), std::string::npos) << m;
    EXPECT_NE(m.find("this run has epochs 3,"), std::string::npos) << m;
  }
}

TEST(LenetTrainer, MissingDataNamesThePathAndWhatWasLookedFor) {
  TempDir dir("kiln-lenet-nodata");
  TrainerOptions o;
  o.data = dir / "nowhere";
  try {
    run_training(o);
    FAIL() << "expected kiln::Error";
  } catch (const Error& err) {
    EXPECT_NE(err.message().find("--data '" + o.data + "' does not exist"), std::string::npos) << err.message();
    EXPECT_NE(err.message().find("cifar-10-batches-bin/"), std::string::npos) << err.message();
  }
  o.data = dir.path().string();  // exists, but empty
  try {
    run_training(o);
    FAIL() << "expected kiln::Error";
  } catch (const Error& err) {
    EXPECT_NE(err.message().find("holds neither cifar-10-batches-bin/"), std::string::npos) << err.message();
  }
}

// Without a GPU (or in a build without CUDA) --device cuda is refused with a
// message saying so, before any data is read; main() prints it.
TEST(LenetTrainer, CudaDeviceWithoutAGpuFailsSayingSo) {
  if (gpu_present()) GTEST_SKIP() << "this machine has a GPU; the no-GPU message cannot be seen";
  TempDir dir("kiln-lenet-cuda");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  o.device = "cuda";
  o.epochs = 1;
  std::ostringstream sink;
  try {
    run_training(o, {.out = &sink});
    ADD_FAILURE() << "--device cuda trained without a GPU";
  } catch (const Error& err) {
#ifdef KILN_WITH_CUDA
    EXPECT_NE(err.message().find("no CUDA device is available"), std::string::npos) << err.message();
#else
    EXPECT_NE(err.message().find("KILN_CUDA=OFF"), std::string::npos) << err.message();
#endif
  }
}

// On a GPU the same run learns as on the CPU: every epoch's losses and
// accuracy agree to float32 rounding (the kernels differ in summation order,
// not in arithmetic), starting from the same seed.
TEST(LenetTrainer, CudaDeviceTrainsAsTheCpuDoes) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device on this machine";
  TempDir dir("kiln-lenet-cuda");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir, kWorkers);
  std::ostringstream sink;
  const TrainingResult cpu = run_training(o, {.out = &sink});
  o.device = "cuda";
  const TrainingResult gpu = run_training(o, {.out = &sink});
  ASSERT_EQ(gpu.history.size(), cpu.history.size());
  for (size_t i = 0; i < cpu.history.size(); ++i) {
    EXPECT_NEAR(gpu.history[i].train_loss, cpu.history[i].train_loss, 1e-3 * cpu.history[i].train_loss) << i;
    EXPECT_NEAR(gpu.history[i].test_loss, cpu.history[i].test_loss, 1e-3 * cpu.history[i].test_loss) << i;
    // One image of the 100 flipped is 0.01 (plus rounding).
    EXPECT_NEAR(gpu.history[i].test_accuracy, cpu.history[i].test_accuracy, 0.015) << i;
  }
}

}  // namespace
}  // namespace kiln::apps::lenet
