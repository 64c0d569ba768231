// Training checkpoints resume bitwise, and refuse files that do not fit.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "kiln.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/dropout.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "optim/training_checkpoint.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::optim;
namespace {

namespace F = nn::functional;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/kiln_ckpt_" + std::to_string(getpid()) + "_" + name;
}

// A run: a small MLP with dropout (so the random stream matters), SGD with
// momentum and weight decay (so the optimizer state matters) and StepLR (so
// the scheduler state matters). Batches depend only on the step number.
struct TrainingRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<SGD> optimizer;
  std::unique_ptr<StepLR> scheduler;

  explicit TrainingRun(uint64_t init_seed) {
    manual_seed(init_seed);
    model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Linear>(16, 3));
    SGDOptions options = SGDOptions(0.1).momentum(0.9).weight_decay(1e-3);
    optimizer = std::make_unique<SGD>(model->parameters(), options);
    scheduler = std::make_unique<StepLR>(*optimizer, 3, 0.5);
  }

  void train_step(int64_t step) {
    Generator data(1000 + static_cast<uint64_t>(step));
    Tensor x = randn({4, 8}, {}, &data);
    Tensor y = randint(0, 3, {4}, DType::Int64, &data);
    optimizer->zero_grad();
    Tensor loss = F::cross_entropy((*model)(x), y);
    loss.backward();
    optimizer->step();
    scheduler->step();
  }

  std::vector<std::vector<float>> weights() const {
    std::vector<std::vector<float>> out;
    for (const Tensor& p : model->parameters()) {
      Tensor c = p.contiguous();
      out.emplace_back(c.data<float>(), c.data<float>() + c.numel());
    }
    return out;
  }

  TrainingState state(int64_t step = 0) { return {*model, *optimizer, scheduler.get(), step}; }
};

TEST(TrainingCheckpoint, ResumeGivesTheUninterruptedTrajectoryBitwise) {
  TrainingRun straight(7);
  for (int64_t s = 0; s < 10; ++s) straight.train_step(s);

  std::string path = temp_path("resume.safetensors");
  {
    TrainingRun first_half(7);
    for (int64_t s = 0; s < 5; ++s) first_half.train_step(s);
    TrainingState st = first_half.state(5);
    st.extra["epoch"] = "1";
    save_training_checkpoint(path, st);
  }
  // A fresh process would start from other weights and another random
  // state; the checkpoint must restore all of it.
  TrainingRun resumed(12345);
  randn({100});
  LoadedCheckpoint loaded = load_training_checkpoint(path, resumed.state());
  EXPECT_EQ(loaded.step, 5);
  EXPECT_EQ(loaded.extra.at("epoch"), "1");
  for (int64_t s = loaded.step; s < 10; ++s) resumed.train_step(s);
  EXPECT_EQ(resumed.weights(), straight.weights());
  EXPECT_EQ(resumed.scheduler->get_last_lr(), straight.scheduler->get_last_lr());
  std::remove(path.c_str());
}

TEST(TrainingCheckpoint, RefusesFilesThatDoNotFitTheRun) {
  std::string path = temp_path("mismatch.safetensors");
  TrainingRun run(1);
  run.train_step(0);
  save_training_checkpoint(path, run.state(1));

  // Another optimizer.
  SGDOptions options(0.1);
  auto other_model = std::make_shared<nn::Linear>(8, 3);
  SGD sgd(other_model->parameters(), options);
  expect_error([&] { load_training_checkpoint(path, {*other_model, sgd, nullptr}); },
               "load_training_checkpoint: " + path + " holds scheduler 'StepLR' but the run has ''");
  StepLR sched(sgd, 3, 0.5);
  expect_error([&] { load_training_checkpoint(path, {*other_model, sgd, &sched}); },
               "load_training_checkpoint: " + path + ": no entry for model parameter 'weight'");

  // A file that is not a checkpoint, and a truncated one.
  std::string plain = temp_path("plain.safetensors");
  save_safetensors(plain, run.model->state_dict());
  expect_error([&] { load_training_checkpoint(plain, run.state()); }, "is not a Kiln training checkpoint");
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  expect_error([&] { load_training_checkpoint(path, run.state()); }, path);
  std::remove(path.c_str());
  std::remove(plain.c_str());
}

}  // namespace
}  // namespace kiln
