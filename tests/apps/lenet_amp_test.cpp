// kiln-lenet --amp: the flag, a mixed-precision run on the CPU (bfloat16
// autocast) that learns as the float32 one does, and its checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "apps/lenet/options.h"
#include "apps/lenet/trainer.h"
#include "lenet_test_data.h"

namespace kiln::apps::lenet {
namespace {

using testing::TempDir;

using testing::small_run;

TEST(LenetAmp, FlagParsesAndIsDocumented) {
  EXPECT_FALSE(parse_command_line(std::vector<std::string>{"kiln-lenet"}).options->amp);
  EXPECT_TRUE(parse_command_line(std::vector<std::string>{"kiln-lenet", "--amp"}).options->amp);
  TempDir dir("kiln-lenet-amp-help");
  testing::ProcessResult r = testing::run_kiln_lenet({"--help"}, dir / "err.txt");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--amp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bfloat16"), std::string::npos) << r.out;
}

TEST(LenetAmp, BFloat16RunLearnsAsTheFloat32RunDoes) {
  TempDir dir("kiln-lenet-amp");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir);
  std::ostringstream out32, out16;
  TrainingResult f32 = run_training(o, {.out = &out32});
  o.amp = true;
  TrainingResult amp = run_training(o, {.out = &out16});
  ASSERT_EQ(amp.status, RunStatus::Finished);
  EXPECT_NE(out16.str().find(", mixed precision bfloat16"), std::string::npos) << out16.str();
  EXPECT_EQ(out32.str().find("mixed precision"), std::string::npos);
  // The parameters stay float32.
  for (const Tensor& p : amp.model->parameters()) EXPECT_EQ(p.dtype(), DType::Float32);
  ASSERT_EQ(amp.history.size(), 2u);
  EXPECT_LT(amp.history[1].train_loss, amp.history[0].train_loss);
  EXPECT_NEAR(amp.history[1].train_loss, f32.history[1].train_loss, 0.01);
  EXPECT_NEAR(amp.history[1].test_loss, f32.history[1].test_loss, 0.01);
  EXPECT_NE(amp.history[1].train_loss, f32.history[1].train_loss);  // it did run in bfloat16
}

TEST(LenetAmp, ResumeKeepsThePrecisionOfTheSavedRun) {
  TempDir dir("kiln-lenet-amp-resume");
  testing::write_synthetic_cifar(dir.path());
  TrainerOptions o = small_run(dir);
  o.amp = true;
  std::ostringstream sink;
  TrainingResult whole = run_training(o, {.out = &sink});

  o.save = dir / "run.ckpt";
  TrainingResult first = run_training(o, {.out = &sink, .should_stop = [](int64_t step) { return step == 13; }});
  ASSERT_EQ(first.status, RunStatus::Interrupted);
  o.resume = o.save;
  o.save.clear();
  TrainingResult second = run_training(o, {.out = &sink});
  ASSERT_EQ(second.status, RunStatus::Finished);
  TensorDict a = whole.model->state_dict(), b = second.model->state_dict();
  for (const auto& [name, t] : a) {
    Tensor u = t.contiguous(), v = b.at(name).contiguous();
    EXPECT_EQ(std::memcmp(u.data_ptr(), v.data_ptr(), u.nbytes()), 0) << name << " differs";
  }

  o.amp = false;
  try {
    run_training(o, {.out = &sink});
    ADD_FAILURE() << "resuming an --amp checkpoint without --amp should fail";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("seed 0, amp; this run has"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace kiln::apps::lenet
