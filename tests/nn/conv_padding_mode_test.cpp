// Conv2d's and Conv1d's padding_mode (reflect, replicate, circular, built
// on F::pad): against PyTorch on the same weights and inputs (outputs and
// the gradients of the input, weight and bias), against F::pad followed by
// an unpadded convolution, gradcheck, printing as torch, and the errors.
#include <memory>
#include <sstream>

#include "nn/conv.h"
#include "nn/conv1d.h"
#include "nn/functional.h"
#include "nn/functional_composite.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::make64;
using testing::expect_matches_torch;
using testing::layer_case;
using testing::OracleCase;

TEST(ConvPaddingMode, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  manual_seed(1);
  using P = PaddingMode;
  std::vector<OracleCase> cases = {
      layer_case("nn.Conv2d(2, 4, 3, padding=(1, 2), padding_mode='reflect')",
                 make64<Conv2d>(Conv2dOptions(2, 4, 3).padding({1, 2}).padding_mode(P::Reflect)),
                 leaf({2, 2, 5, 6}, 1)),
      layer_case(
          "nn.Conv2d(2, 4, (3, 2), stride=2, padding=2, padding_mode='replicate', bias=False)",
          make64<Conv2d>(Conv2dOptions(2, 4, {3, 2}).stride(2).padding(2).padding_mode(P::Replicate).bias(false)),
          leaf({1, 2, 4, 5}, 2)),
      layer_case("nn.Conv2d(4, 4, 3, padding=1, dilation=2, groups=2, padding_mode='circular')",
                 make64<Conv2d>(Conv2dOptions(4, 4, 3).padding(1).dilation(2).groups(2).padding_mode(P::Circular)),
                 leaf({2, 4, 6, 5}, 3)),
      layer_case("nn.Conv2d(2, 3, 3, padding=1, padding_mode='reflect')",
                 make64<Conv2d>(2, 3, 3, 1, 1, 1, 1, true, P::Reflect), leaf({2, 4, 4}, 4)),
      layer_case("nn.Conv1d(3, 2, 3, padding=2, padding_mode='circular')",
                 make64<Conv1d>(Conv1dOptions(3, 2, 3).padding(2).padding_mode(P::Circular)), leaf({2, 3, 5}, 5)),
      layer_case("nn.Conv1d(2, 4, 5, stride=2, padding=3, padding_mode='reflect')",
                 make64<Conv1d>(2, 4, 5, 2, 3, 1, 1, true, P::Reflect), leaf({1, 2, 7}, 6)),
      layer_case("nn.Conv1d(2, 2, 3, padding=1, padding_mode='replicate')",
                 make64<Conv1d>(Conv1dOptions(2, 2, 3).padding(1).padding_mode(P::Replicate)), leaf({2, 6}, 7)),
  };
  expect_matches_torch(cases);
}

TEST(ConvPaddingMode, IsPadThenUnpaddedConvolution) {
  Tensor x = uniform64({2, 3, 5, 4}, 1);
  auto conv = make64<Conv2d>(Conv2dOptions(3, 2, 3).padding({2, 1}).padding_mode(PaddingMode::Replicate));
  Tensor want = F::conv2d(F::pad(x, {1, 1, 2, 2}, F::PadMode::Replicate), conv->weight, conv->bias);
  EXPECT_EQ(testing::values_of((*conv)(x)), testing::values_of(want));
  // Padding 0 pads nothing in any mode.
  auto plain = make64<Conv2d>(Conv2dOptions(3, 2, 3).padding_mode(PaddingMode::Reflect));
  EXPECT_EQ(testing::values_of((*plain)(x)), testing::values_of(F::conv2d(x, plain->weight, plain->bias)));
}

TEST(ConvPaddingMode, Gradcheck) {
  auto conv = make64<Conv2d>(Conv2dOptions(2, 2, 3).padding(1).padding_mode(PaddingMode::Reflect));
  expect_gradcheck([conv](const TensorList& in) { return TensorList{(*conv)(in[0])}; }, {leaf({1, 2, 3, 4}, 1)});
  auto conv1 = make64<Conv1d>(Conv1dOptions(2, 3, 3).padding(2).padding_mode(PaddingMode::Circular));
  expect_gradcheck([conv1](const TensorList& in) { return TensorList{(*conv1)(in[0])}; }, {leaf({2, 2, 4}, 2)});
}

TEST(ConvPaddingMode, PrintsAsTorch) {
  EXPECT_EQ(Conv2d(Conv2dOptions(3, 4, 3).padding(1).padding_mode(PaddingMode::Reflect)).extra_repr(),
            "3, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), padding_mode=reflect");
  EXPECT_EQ(Conv1d(Conv1dOptions(3, 4, 3).padding(1).padding_mode(PaddingMode::Circular).bias(false)).extra_repr(),
            "3, 4, kernel_size=(3,), stride=(1,), padding=(1,), bias=False, padding_mode=circular");
  std::ostringstream os;
  os << Conv2d(Conv2dOptions(1, 1, 1).padding_mode(PaddingMode::Replicate));
  EXPECT_EQ(os.str(), "Conv2d(1, 1, kernel_size=(1, 1), stride=(1, 1), padding_mode=replicate)");
  EXPECT_EQ(Conv2d(3, 4, 3).extra_repr(), "3, 4, kernel_size=(3, 3), stride=(1, 1)");
}

TEST(ConvPaddingMode, Errors) {
  // The padding's own rules are F::pad's: reflect needs padding < size.
  Conv2d reflect(Conv2dOptions(1, 1, 3).padding(3).padding_mode(PaddingMode::Reflect));
  expect_error(
      [&] {
        reflect(uniform64({1, 1, 3, 5}, 1).to(DType::Float32));
      },
      "pad: reflect padding (3, 3) of dim 2 must be less than its size 3");
  Conv1d circular(Conv1dOptions(1, 1, 3).padding(4).padding_mode(PaddingMode::Circular));
  expect_error([&] { circular(uniform64({1, 1, 3}, 1).to(DType::Float32)); }, "pad: circular padding (4, 4) of dim 2");
  Conv2d replicate(Conv2dOptions(1, 1, 3).padding(1).padding_mode(PaddingMode::Replicate));
  expect_error(
      [&] {
        replicate(uniform64({4, 4}, 1).to(DType::Float32));
      },
      "Conv2d: expected input of shape (N, C, H, W) or (C, H, W), got 2D input of shape [4, 4]");
  Conv1d conv1(Conv1dOptions(2, 1, 3).padding(1).padding_mode(PaddingMode::Reflect));
  expect_error([&] { conv1(uniform64({1, 3, 5}, 1).to(DType::Float32)); }, "Conv1d: expected 2 input channels");
}

}  // namespace
}  // namespace kiln::nn
