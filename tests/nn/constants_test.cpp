// LibTorch's mode constants (nn/constants.h, Note [Mode constants]): each
// converts at compile time to the value it names of every enum that has it,
// to no other enum, and LibTorch's spellings of the calls compile and equal
// the calls written with Kiln's enums.
#include <gtest/gtest.h>

#include <type_traits>

#include "autograd/autograd_test_util.h"
#include "kiln.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::uniform64;
using testing::values_of;

// What each constant names, checked by the compiler.
static_assert(PaddingMode(kZeros) == PaddingMode::Zeros);
static_assert(PaddingMode(kReflect) == PaddingMode::Reflect);
static_assert(PaddingMode(kReplicate) == PaddingMode::Replicate);
static_assert(PaddingMode(kCircular) == PaddingMode::Circular);
static_assert(F::PadMode(kConstant) == F::PadMode::Constant);
static_assert(F::PadMode(kReflect) == F::PadMode::Reflect);
static_assert(F::PadMode(kReplicate) == F::PadMode::Replicate);
static_assert(F::PadMode(kCircular) == F::PadMode::Circular);
static_assert(F::InterpolateMode(kNearest) == F::InterpolateMode::Nearest);
static_assert(F::InterpolateMode(kNearestExact) == F::InterpolateMode::NearestExact);
static_assert(F::InterpolateMode(kLinear) == F::InterpolateMode::Linear);
static_assert(F::InterpolateMode(kBilinear) == F::InterpolateMode::Bilinear);
static_assert(F::InterpolateMode(kBicubic) == F::InterpolateMode::Bicubic);
static_assert(F::InterpolateMode(kTrilinear) == F::InterpolateMode::Trilinear);
static_assert(F::InterpolateMode(kArea) == F::InterpolateMode::Area);
static_assert(F::Reduction(kNone) == F::Reduction::None);
static_assert(F::Reduction(kMean) == F::Reduction::Mean);
static_assert(F::Reduction(kSum) == F::Reduction::Sum);
static_assert(F::GeluApproximation(kNone) == F::GeluApproximation::None);
static_assert(F::GeluApproximation(kTanh) == F::GeluApproximation::Tanh);
static_assert(RNNNonlinearity(kTanh) == RNNNonlinearity::Tanh);
static_assert(RNNNonlinearity(kReLU) == RNNNonlinearity::ReLU);

// A constant that its enum lacks does not convert.
static_assert(!std::is_convertible_v<enumtype::kBilinear, PaddingMode>);
static_assert(!std::is_convertible_v<enumtype::kZeros, F::PadMode>);
static_assert(!std::is_convertible_v<enumtype::kConstant, PaddingMode>);
static_assert(!std::is_convertible_v<enumtype::kSum, F::InterpolateMode>);
static_assert(!std::is_convertible_v<enumtype::kReLU, F::GeluApproximation>);
static_assert(!std::is_convertible_v<enumtype::kReflect, int>);

TEST(ModeConstants, ConvolutionPaddingMode) {
  const Conv2dOptions o = Conv2dOptions(2, 3, 3).padding(1).padding_mode(kReflect);
  EXPECT_EQ(o.padding_mode(), PaddingMode::Reflect);
  EXPECT_TRUE(o.padding_mode() == kReflect);  // compares enums
  EXPECT_FALSE(o.padding_mode() == kCircular);
  auto conv = testing::make64<Conv2d>(o);
  auto same = testing::make64<Conv2d>(Conv2dOptions(2, 3, 3).padding(1).padding_mode(PaddingMode::Reflect));
  same->weight.detach().copy_(conv->weight.detach());
  same->bias.detach().copy_(conv->bias.detach());
  Tensor x = uniform64({1, 2, 4, 5}, 1);
  EXPECT_EQ(values_of((*conv)(x)), values_of((*same)(x)));
  EXPECT_EQ(Conv1dOptions(2, 2, 3).padding_mode(kCircular).padding_mode(), PaddingMode::Circular);
  EXPECT_EQ(Conv2d(2, 2, 3, 1, 1, 1, 1, true, kReplicate).padding_mode, PaddingMode::Replicate);
  EXPECT_EQ(Conv2dOptions(2, 2, 3).padding_mode(kReflect).padding_mode(kZeros).padding_mode(), PaddingMode::Zeros);
}

TEST(ModeConstants, PadAndInterpolate) {
  Tensor x = uniform64({1, 2, 4, 5}, 2);
  EXPECT_EQ(values_of(F::pad(x, F::PadFuncOptions({1, 1, 2, 0}).mode(kReflect))),
            values_of(F::pad(x, {1, 1, 2, 0}, F::PadMode::Reflect)));
  EXPECT_EQ(values_of(F::pad(x.select(0, 0), {1, 1}, kCircular)),
            values_of(F::pad(x.select(0, 0), {1, 1}, F::PadMode::Circular)));
  EXPECT_EQ(values_of(F::pad(x, {1, 2, 2, 1}, kReplicate)), values_of(F::pad(x, {1, 2, 2, 1}, F::PadMode::Replicate)));
  EXPECT_EQ(values_of(F::pad(x, F::PadFuncOptions({1, 0}).mode(kConstant).value(2.0))),
            values_of(F::pad(x, {1, 0}, F::PadMode::Constant, 2.0)));
  const F::InterpolateFuncOptions up = F::InterpolateFuncOptions().size({8, 9}).mode(kBilinear).align_corners(false);
  EXPECT_EQ(up.mode(), F::InterpolateMode::Bilinear);
  EXPECT_EQ(values_of(F::interpolate(x, up)),
            values_of(F::interpolate(x, {.size = {8, 9}, .mode = F::InterpolateMode::Bilinear})));
  EXPECT_EQ(F::interpolate(x, F::InterpolateFuncOptions().scale_factor({2.0}).mode(kNearest)).shape(),
            (Shape{1, 2, 8, 10}));
  Upsample upsample(F::InterpolateFuncOptions().scale_factor({2.0}).mode(kBicubic));
  EXPECT_EQ(upsample(x).shape(), (Shape{1, 2, 8, 10}));
}

TEST(ModeConstants, ReductionsAndActivations) {
  Tensor y = uniform64({3, 4}, 3), t = uniform64({3, 4}, 4);
  EXPECT_EQ(values_of(MSELoss(MSELossOptions(kSum))(y, t)), values_of(F::mse_loss(y, t, F::Reduction::Sum)));
  EXPECT_EQ(values_of(F::l1_loss(y, t, F::L1LossFuncOptions(kNone))), values_of(F::l1_loss(y, t, F::Reduction::None)));
  EXPECT_EQ(CrossEntropyLossOptions().reduction(kMean).reduction(), F::Reduction::Mean);
  EXPECT_EQ(values_of(GELU(kTanh)(y)), values_of(F::gelu(y, F::GeluApproximation::Tanh)));
  EXPECT_EQ(F::GELUFuncOptions().approximate(kNone).approximate(), F::GeluApproximation::None);
  EXPECT_EQ(RNNOptions(4, 3).nonlinearity(kReLU).nonlinearity(), RNNNonlinearity::ReLU);
}

}  // namespace
}  // namespace kiln::nn
