// kiln-gpt train --amp on the CPU (bfloat16 autocast, Note [Autocast]).
#include <gtest/gtest.h>

#include <sstream>

#include "apps/gpt/trainer.h"
#include "gpt_test_data.h"

namespace kiln::apps::gpt {
namespace {

using testing::TempDir;

// --amp on the CPU: the matrix products in bfloat16; close to float32, not equal.
TEST(GptAmp, TrainsCloseToFloat32) {
  TempDir dir("kiln-gpt-amp");
  TrainOptions o = testing::tiny_run(dir);
  std::ostringstream out;
  TrainingResult f32 = run_training(o, {.out = &out});
  o.amp = true;
  TrainingResult amp = run_training(o, {.out = &out});
  ASSERT_EQ(amp.history.size(), f32.history.size());
  EXPECT_NE(amp.history.back().val_loss, f32.history.back().val_loss);  // it did run in bfloat16
  EXPECT_NEAR(amp.history.back().val_loss, f32.history.back().val_loss, 0.05);
  EXPECT_LT(amp.history.back().val_loss, amp.history.front().val_loss);
}

}  // namespace
}  // namespace kiln::apps::gpt
