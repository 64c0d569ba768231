// Mixed precision end to end: a small classifier trained for a few hundred
// steps under CPU autocast (bfloat16, and float16 with a GradScaler) ends
// at the loss float32 training reaches.
#include <gtest/gtest.h>

#include "autograd/autocast.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "tensor/random.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using optim::GradScaler;
using optim::GradScalerOptions;

constexpr int64_t kSteps = 300;
constexpr int64_t kMidStep = 30;  // still falling fast: about 0.05

// x: (256, 8) standard normal; y: (256) the argmax of x @ M over 4 classes
// for a fixed random M: separable, so the loss keeps falling.
struct Data {
  Tensor x, y;
};

Data make_data() {
  Generator gen(7);
  Tensor x = randn({256, 8}, DType::Float32, &gen);
  Tensor m = randn({8, 4}, DType::Float32, &gen);
  return {x, ops::argmax(ops::mm(x, m), 1)};
}

struct RunResult {
  double first_loss = 0, mid_loss = 0, last_loss = 0;
  int64_t skipped = 0;  // steps the scaler skipped
  DType logits_dtype = DType::Float32;
  DType grad_dtype = DType::Float32;
};

// Full-batch SGD on a 8-32-4 MLP from seed 1; autocast in `dtype` unless
// float32, with `scaler` unscaling and skipping.
RunResult train(DType dtype, GradScaler& scaler) {
  manual_seed(1);
  nn::Linear fc1(8, 32), fc2(32, 4);
  std::vector<Tensor> params = fc1.parameters();
  for (const Tensor& p : fc2.parameters()) params.push_back(p);
  optim::SGD sgd(params, optim::SGDOptions(0.2).momentum(0.9));
  Data data = make_data();
  RunResult r;
  for (int64_t step = 0; step < kSteps; ++step) {
    sgd.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::CPU, dtype == DType::Float32 ? DType::BFloat16 : dtype,
                             dtype != DType::Float32);
      Tensor logits = fc2(F::relu(fc1(data.x)));
      r.logits_dtype = logits.dtype();
      loss = F::cross_entropy(logits, data.y);
    }
    scaler.scale(loss).backward();
    if (!scaler.step(sgd)) ++r.skipped;
    scaler.update();
    if (step == 0) r.first_loss = loss.item<double>();
    if (step == kMidStep) r.mid_loss = loss.item<double>();
    r.last_loss = loss.item<double>();
  }
  r.grad_dtype = fc1.weight.grad().dtype();
  return r;
}

TEST(MixedPrecision, BFloat16AutocastTrainsLikeFloat32) {
  GradScaler off({.enabled = false});
  RunResult f32 = train(DType::Float32, off);
  RunResult bf16 = train(DType::BFloat16, off);
  EXPECT_EQ(f32.logits_dtype, DType::Float32);
  EXPECT_EQ(bf16.logits_dtype, DType::BFloat16);
  EXPECT_EQ(bf16.grad_dtype, DType::Float32);
  // From ln 4 = 1.39 to near 0, along the same path.
  EXPECT_NEAR(bf16.first_loss, f32.first_loss, 0.01);
  EXPECT_LT(f32.last_loss, 0.01 * f32.first_loss);
  EXPECT_NEAR(bf16.mid_loss, f32.mid_loss, 0.1 * f32.mid_loss);
  EXPECT_NEAR(bf16.last_loss, f32.last_loss, 0.1 * f32.last_loss);
  EXPECT_NE(bf16.last_loss, f32.last_loss);  // it did run in bfloat16
}

TEST(MixedPrecision, Float16AutocastWithGradScalerTrainsLikeFloat32) {
  GradScaler off({.enabled = false});
  RunResult f32 = train(DType::Float32, off);
  // 2^24 overflows float16 gradients (about 1/256 * 2^24 = 65536 > 65504):
  // the first steps are skipped while the scale backs off.
  GradScaler scaler({.init_scale = 16777216.0, .growth_interval = 100});
  RunResult f16 = train(DType::Float16, scaler);
  EXPECT_EQ(f16.logits_dtype, DType::Float16);
  EXPECT_EQ(f16.grad_dtype, DType::Float32);
  EXPECT_GE(f16.skipped, 1);
  EXPECT_LE(f16.skipped, 20);
  EXPECT_LT(scaler.get_scale(), 16777216.0);
  EXPECT_NEAR(f16.last_loss, f32.last_loss, 0.1 * f32.last_loss);
}

}  // namespace
}  // namespace kiln
