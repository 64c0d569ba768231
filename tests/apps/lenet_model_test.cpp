// kiln-lenet --model: ResNet-20 (nn/models/resnet.h) through the same
// trainer as LeNet, on the tiny synthetic CIFAR-10 folder, and the errors of
// the flag.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "apps/lenet/models.h"
#include "apps/lenet/trainer.h"
#include "lenet_test_data.h"
#include "nn/models/resnet.h"

namespace kiln::apps::lenet {
namespace {

using testing::contains;
using testing::parse_error;
using testing::TempDir;

// The message of the kiln::Error `run` throws, or "" when it throws none.
std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(LenetModels, NamesAndConstruction) {
  EXPECT_EQ(model_names(), (std::vector<std::string>{"lenet", "resnet20"}));
  EXPECT_NE(std::dynamic_pointer_cast<nn::LeNet>(make_model("lenet")), nullptr);
  auto resnet = std::dynamic_pointer_cast<nn::CifarResNet>(make_model("resnet20"));
  ASSERT_NE(resnet, nullptr);
  EXPECT_EQ(resnet->depth, 20);
  EXPECT_EQ(resnet->num_classes, 10);
  EXPECT_EQ(model_title("resnet20"), "ResNet-20");
  EXPECT_EQ(model_title("lenet"), "LeNet");
}

TEST(LenetModels, TheFlagDefaultsToLeNetAndNamesTheChoicesWhenUnknown) {
  EXPECT_EQ(parse_command_line(std::vector<std::string>{"kiln-lenet"}).options->model, "lenet");
  EXPECT_EQ(parse_command_line(std::vector<std::string>{"kiln-lenet", "--model", "resnet20"}).options->model,
            "resnet20");
  EXPECT_EQ(parse_error({"--model", "vgg16"}), "--model: unknown model 'vgg16' (expected lenet or resnet20)");
  TrainerOptions o;
  o.model = "ResNet20";  // names are exact
  EXPECT_EQ(error_of([&] { validate(o); }), "--model: unknown model 'ResNet20' (expected lenet or resnet20)");
}

TEST(LenetModels, TheProgramRefusesAnUnknownModelWithExitCode1) {
  TempDir dir("kiln-lenet-model-error");
  testing::ProcessResult r = testing::run_kiln_lenet({"--model", "resnet18"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "kiln-lenet: --model: unknown model 'resnet18' (expected lenet or resnet20)\n");
}

// Two epochs of 10 steps of ResNet-20 on 200 synthetic images: it learns,
// checkpoints, evaluates from the checkpoint, and neither a LeNet run nor
// another recipe resumes it.
TEST(LenetModels, ResNet20TrainsCheckpointsAndEvaluates) {
  TempDir dir("kiln-lenet-resnet20");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir);
  o.model = "resnet20";
  o.lr = 0.05;
  o.save = dir / "run.ckpt";
  std::ostringstream out;
  TrainingResult r = run_training(o, {.out = &out});
  ASSERT_EQ(r.status, RunStatus::Finished);
  ASSERT_NE(std::dynamic_pointer_cast<nn::CifarResNet>(r.model), nullptr);
  EXPECT_NE(out.str().find("ResNet-20 (272474 parameters)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("resnet20, epochs 2,"), std::string::npos) << out.str();
  ASSERT_EQ(r.history.size(), 2u);
  EXPECT_LT(r.history[1].train_loss, r.history[0].train_loss);
  // The four brightness classes are told apart well above chance (25%).
  EXPECT_GT(r.evaluation.accuracy, 0.5);

  TrainerOptions e;
  e.model = "resnet20";
  e.data = o.data;
  e.eval_only = true;
  e.weights = o.save;  // a training checkpoint's "model." entries
  std::ostringstream sink;
  TrainingResult evaluated = run_training(e, {.out = &sink});
  EXPECT_EQ(evaluated.status, RunStatus::Evaluated);
  EXPECT_DOUBLE_EQ(evaluated.evaluation.accuracy, r.evaluation.accuracy);
  EXPECT_NEAR(evaluated.evaluation.loss, r.evaluation.loss, 1e-5);

  // The weights are ResNet-20's: LeNet cannot load them, and says so.
  e.model = "lenet";
  const std::string wrong_model = error_of([&] { run_training(e, {.out = &sink}); });
  EXPECT_TRUE(contains(wrong_model, "' does not hold LeNet weights: ")) << wrong_model;
  // A checkpoint of one model is not resumed as the other: the tensors do not fit.
  TrainerOptions resume = o;
  resume.resume = o.save;
  resume.save.clear();
  resume.model = "lenet";
  const std::string other_model = error_of([&] { run_training(resume, {.out = &sink}); });
  EXPECT_TRUE(contains(other_model, "model.conv1.weight has shape [16, 3, 3, 3] but the model's is [6, 3, 5, 5]"))
      << other_model;
  // The model is part of the recipe a resumed run must repeat.
  resume.model = "resnet20";
  resume.epochs = 3;
  const std::string other_recipe = error_of([&] { run_training(resume, {.out = &sink}); });
  EXPECT_TRUE(contains(other_recipe, "the checkpoint was made with resnet20, epochs 2,")) << other_recipe;
  EXPECT_TRUE(contains(other_recipe, "this run has resnet20, epochs 3,")) << other_recipe;
}

}  // namespace
}  // namespace kiln::apps::lenet
