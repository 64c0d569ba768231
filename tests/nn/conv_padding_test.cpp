// padding='same' and 'valid' for Conv1d and Conv2d and their functional forms
// (nn/conv_padding.h, Note [Same padding]): against PyTorch on the same
// weights and inputs (outputs and the gradients of the input, weight and
// bias) with even and odd totals, dilation, every padding_mode and unbatched
// inputs; the output keeps the input's size; gradcheck; printing as torch;
// the errors.
#include <memory>
#include <sstream>

#include "kiln.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::make64;
using testing::layer_case;
using testing::OracleCase;

TEST(ConvPadding, SidesOfSame) {
  // dilation * (kernel - 1) in all, the odd one after.
  EXPECT_EQ(conv_padding_sides(Conv1dPadding(kSame), 3, 1), (PadSides{1, 1}));
  EXPECT_EQ(conv_padding_sides(Conv1dPadding(kSame), 4, 1), (PadSides{1, 2}));
  EXPECT_EQ(conv_padding_sides(Conv1dPadding(kSame), 4, 2), (PadSides{3, 3}));
  EXPECT_EQ(conv_padding_sides(Conv1dPadding(kSame), 1, 5), (PadSides{0, 0}));
  EXPECT_EQ(conv_padding_sides(Conv1dPadding(kValid), 4, 1), (PadSides{0, 0}));
  EXPECT_EQ(conv_padding_sides(Conv1dPadding(2), 4, 1), (PadSides{2, 2}));
  const auto [h, w] = conv_padding_sides(Conv2dPadding(kSame), {2, 5}, {3, 1});
  EXPECT_EQ(h, (PadSides{1, 2}));
  EXPECT_EQ(w, (PadSides{2, 2}));
  const auto [ph, pw] = conv_padding_sides(Conv2dPadding{1, 2}, {3, 3}, 1);
  EXPECT_EQ(ph, (PadSides{1, 1}));
  EXPECT_EQ(pw, (PadSides{2, 2}));
}

TEST(ConvPadding, LayersMatchTorch) {
  SKIP_WITHOUT_TORCH();
  manual_seed(2);
  using P = PaddingMode;
  std::vector<OracleCase> cases = {
      layer_case("nn.Conv2d(2, 3, 3, padding='same')", make64<Conv2d>(Conv2dOptions(2, 3, 3).padding(kSame)),
                 leaf({2, 2, 5, 4}, 1)),
      // Height: 3 in all (1 above, 2 below); width: 2 * 2 = 4 (2 and 2).
      layer_case("nn.Conv2d(2, 4, (4, 3), padding='same', dilation=(1, 2))",
                 make64<Conv2d>(Conv2dOptions(2, 4, {4, 3}).padding(kSame).dilation({1, 2})), leaf({2, 2, 6, 7}, 2)),
      layer_case("nn.Conv2d(2, 2, 2, padding='same', bias=False)",
                 make64<Conv2d>(Conv2dOptions(2, 2, 2).padding(kSame).bias(false)), leaf({2, 4, 5}, 3)),
      layer_case("nn.Conv2d(4, 4, 4, padding='same', groups=2, padding_mode='reflect')",
                 make64<Conv2d>(Conv2dOptions(4, 4, 4).padding(kSame).groups(2).padding_mode(P::Reflect)),
                 leaf({1, 4, 5, 6}, 4)),
      layer_case("nn.Conv2d(2, 3, (2, 3), padding='same', padding_mode='circular')",
                 make64<Conv2d>(2, 3, Size2d(2, 3), 1, kSame, 1, 1, true, P::Circular), leaf({2, 2, 4, 4}, 5)),
      layer_case("nn.Conv2d(2, 3, 3, padding='same', dilation=2, padding_mode='replicate')",
                 make64<Conv2d>(Conv2dOptions(2, 3, 3).padding(kSame).dilation(2).padding_mode(P::Replicate)),
                 leaf({1, 2, 5, 5}, 6)),
      layer_case("nn.Conv2d(2, 3, 3, stride=2, padding='valid')",
                 make64<Conv2d>(Conv2dOptions(2, 3, 3).stride(2).padding(kValid)), leaf({2, 2, 7, 6}, 7)),
      layer_case("nn.Conv2d(2, 3, 3, padding='valid', padding_mode='reflect')",
                 make64<Conv2d>(Conv2dOptions(2, 3, 3).padding(kValid).padding_mode(P::Reflect)),
                 leaf({1, 2, 4, 5}, 8)),
      layer_case("nn.Conv1d(3, 2, 4, padding='same')", make64<Conv1d>(Conv1dOptions(3, 2, 4).padding(kSame)),
                 leaf({2, 3, 6}, 9)),
      layer_case("nn.Conv1d(2, 4, 3, padding='same', dilation=3)",
                 make64<Conv1d>(Conv1dOptions(2, 4, 3).padding(kSame).dilation(3)), leaf({2, 2, 8}, 10)),
      layer_case("nn.Conv1d(2, 2, 2, padding='same', padding_mode='replicate')",
                 make64<Conv1d>(2, 2, 2, 1, kSame, 1, 1, true, P::Replicate), leaf({2, 5}, 11)),
      layer_case("nn.Conv1d(2, 2, 6, padding='same', padding_mode='circular')",
                 make64<Conv1d>(Conv1dOptions(2, 2, 6).padding(kSame).padding_mode(P::Circular)), leaf({1, 2, 6}, 12)),
      layer_case("nn.Conv1d(2, 3, 3, stride=2, padding='valid', padding_mode='reflect')",
                 make64<Conv1d>(Conv1dOptions(2, 3, 3).stride(2).padding(kValid).padding_mode(P::Reflect)),
                 leaf({2, 2, 7}, 13)),
  };
  expect_matches_torch(cases);
}

TEST(ConvPadding, FunctionalMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases = {
      {.name = "F.conv2d padding='same', even kernel, dilation",
       .inputs = {leaf({2, 4, 5, 6}, 1), leaf({4, 2, 2, 3}, 2), leaf({4}, 3)},
       .python = "outs = [F.conv2d(in0, in1, in2, padding='same', dilation=(3, 1), groups=2)]",
       .kiln = [](const TensorList& in) {
         return TensorList{F::conv2d(in[0], in[1], in[2], /*stride=*/1, kSame, /*dilation=*/Size2d(3, 1), 2)};
       }},
      {.name = "F.conv2d padding='same', builder, unbatched",
       .inputs = {leaf({2, 4, 4}, 4), leaf({2, 2, 4, 4}, 5)},
       .python = "outs = [F.conv2d(in0, in1, padding='same')]",
       .kiln = [](const TensorList& in) {
         return TensorList{F::conv2d(in[0], in[1], F::Conv2dFuncOptions().padding(kSame))};
       }},
      {.name = "F.conv2d padding='valid'",
       .inputs = {leaf({1, 2, 5, 5}, 6), leaf({2, 2, 3, 3}, 7)},
       .python = "outs = [F.conv2d(in0, in1, stride=2, padding='valid')]",
       .kiln = [](const TensorList& in) {
         return TensorList{F::conv2d(in[0], in[1], F::Conv2dFuncOptions().stride(2).padding(kValid))};
       }},
      {.name = "F.conv1d padding='same'",
       .inputs = {leaf({2, 2, 7}, 8), leaf({3, 2, 4}, 9), leaf({3}, 10)},
       .python = "outs = [F.conv1d(in0, in1, in2, padding='same', dilation=1)]",
       .kiln = [](const TensorList& in) { return TensorList{F::conv1d(in[0], in[1], in[2], 1, kSame)}; }},
      {.name = "F.conv1d padding='same', builder, unbatched, dilation",
       .inputs = {leaf({2, 9}, 11), leaf({1, 2, 2}, 12)},
       .python = "outs = [F.conv1d(in0, in1, padding='same', dilation=3)]",
       .kiln = [](const TensorList& in) {
         return TensorList{F::conv1d(in[0], in[1], F::Conv1dFuncOptions().padding(kSame).dilation(3))};
       }},
  };
  expect_matches_torch(cases);
}

TEST(ConvPadding, SameKeepsTheSize) {
  for (int64_t k : {1, 2, 3, 4, 5}) {
    for (int64_t d : {1, 2}) {
      Conv2d conv(Conv2dOptions(2, 3, {k, k + 1}).padding(kSame).dilation(d));
      EXPECT_EQ(conv(uniform64({2, 2, 7, 6}, 1).to(DType::Float32)).shape(), (Shape{2, 3, 7, 6})) << k << " " << d;
      Conv1d conv1(Conv1dOptions(2, 3, k).padding(kSame).dilation(d).padding_mode(PaddingMode::Replicate));
      EXPECT_EQ(conv1(uniform64({2, 2, 9}, 1).to(DType::Float32)).shape(), (Shape{2, 3, 9})) << k << " " << d;
    }
  }
  // What the convolution itself pads is the before side; 0 for valid.
  EXPECT_EQ(Conv2d(Conv2dOptions(1, 1, {4, 5}).padding(kSame)).params.padding, Size2d(1, 2));
  EXPECT_EQ(Conv2d(Conv2dOptions(1, 1, 3).padding(kValid)).params.padding, Size2d(0));
}

TEST(ConvPadding, SameIsPadThenConvolution) {
  // An even total pads one more after: right and bottom.
  Tensor x = uniform64({1, 2, 5, 6}, 1), w = uniform64({3, 2, 2, 4}, 2);
  Tensor want = F::conv2d(F::pad(x, {1, 2, 0, 1}), w, Tensor());
  EXPECT_EQ(testing::values_of(F::conv2d(x, w, Tensor(), 1, kSame)), testing::values_of(want));
}

TEST(ConvPadding, Gradcheck) {
  auto conv = make64<Conv2d>(Conv2dOptions(2, 2, {2, 3}).padding(kSame).dilation({1, 2}));
  expect_gradcheck([conv](const TensorList& in) { return TensorList{(*conv)(in[0])}; }, {leaf({1, 2, 4, 5}, 1)});
  auto reflect = make64<Conv2d>(Conv2dOptions(2, 2, 4).padding(kSame).padding_mode(PaddingMode::Reflect));
  expect_gradcheck([reflect](const TensorList& in) { return TensorList{(*reflect)(in[0])}; }, {leaf({1, 2, 4, 5}, 2)});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::conv1d(in[0], in[1], in[2], 1, kSame, 2)}; },
                   {leaf({2, 2, 6}, 3), leaf({3, 2, 4}, 4), leaf({3}, 5)});
}

TEST(ConvPadding, PrintsAsTorch) {
  EXPECT_EQ(Conv2d(Conv2dOptions(2, 3, 3).padding(kSame)).extra_repr(),
            "2, 3, kernel_size=(3, 3), stride=(1, 1), padding=same");
  EXPECT_EQ(Conv1d(Conv1dOptions(2, 3, 4).padding(kValid).padding_mode(PaddingMode::Reflect)).extra_repr(),
            "2, 3, kernel_size=(4,), stride=(1,), padding=valid, padding_mode=reflect");
  EXPECT_EQ(Conv1d(Conv1dOptions(2, 3, 4).padding(kSame)).extra_repr(),
            "2, 3, kernel_size=(4,), stride=(1,), padding=same");
  // An explicit padding prints as before, and zero not at all.
  EXPECT_EQ(Conv2d(Conv2dOptions(2, 3, 3).padding({1, 2})).extra_repr(),
            "2, 3, kernel_size=(3, 3), stride=(1, 1), padding=(1, 2)");
  EXPECT_EQ(Conv2d(Conv2dOptions(2, 3, 3).padding(0)).extra_repr(), "2, 3, kernel_size=(3, 3), stride=(1, 1)");
}

TEST(ConvPadding, Errors) {
  expect_error([] { Conv2d(Conv2dOptions(2, 3, 3).stride({1, 2}).padding(kSame)); },
               "Conv2d: padding='same' is not supported for strided convolutions, got stride (1, 2)");
  expect_error([] { Conv1d(Conv1dOptions(2, 3, 3).stride(2).padding(kSame)); },
               "Conv1d: padding='same' is not supported for strided convolutions, got stride 2");
  Tensor x = uniform64({1, 2, 5, 5}, 1), w = uniform64({3, 2, 3, 3}, 2);
  expect_error([&] { F::conv2d(x, w, F::Conv2dFuncOptions().stride(2).padding(kSame)); },
               "conv2d: padding='same' is not supported for strided convolutions, got stride (2, 2)");
  expect_error([&] { F::conv2d(x, uniform64({3, 2, 3}, 2), Tensor(), 1, kSame); },
               "conv2d: expected a 4-d weight (OC, C/groups, kh, kw), got shape [3, 2, 3]");
  Tensor x1 = uniform64({1, 2, 5}, 1), w1 = uniform64({3, 2, 3}, 2);
  expect_error([&] { F::conv1d(x1, w1, Tensor(), 3, kSame); },
               "conv1d: padding='same' is not supported for strided convolutions, got stride 3");
  // 'valid' takes any stride; a negative explicit padding is still refused.
  EXPECT_EQ(F::conv1d(x1, w1, Tensor(), 2, kValid).shape(), (Shape{1, 3, 2}));
  expect_error([] { Conv1d(Conv1dOptions(2, 3, 3).padding(-1)); }, "Conv1d: padding must be >= 0, got -1");
}

}  // namespace
}  // namespace kiln::nn
