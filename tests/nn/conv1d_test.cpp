// Conv1d and F::conv1d: against PyTorch on the same weights and inputs,
// gradcheck, initialisation bounds, and the errors.
#include <algorithm>
#include <cmath>

#include "nn/conv1d.h"
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
using testing::expect_matches_torch;
using testing::OracleCase;

std::shared_ptr<Conv1d> conv64(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t padding = 0,
                               int64_t dilation = 1, int64_t groups = 1, bool bias = true) {
  auto m = std::make_shared<Conv1d>(in, out, k, stride, padding, dilation, groups, bias);
  m->to(DType::Float64);
  return m;
}

TEST(Conv1dLayer, ParametersInitAndPrinting) {
  Conv1d conv(6, 8, 3, 1, 0, 1, /*groups=*/2);
  EXPECT_EQ(conv.weight.shape(), (Shape{8, 3, 3}));
  EXPECT_EQ(conv.bias.shape(), (Shape{8}));
  // torch's bound for both: 1 / sqrt(fan_in), fan_in = 6 / 2 * 3.
  const double bound = 1.0 / std::sqrt(9.0);
  double largest = 0;
  for (double v : testing::values_of(conv.weight)) largest = std::max(largest, std::abs(v));
  for (double v : testing::values_of(conv.bias)) EXPECT_LE(std::abs(v), bound);
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, bound / 2);  // drawn over the range, not near zero
  EXPECT_EQ(conv.extra_repr(), "6, 8, kernel_size=(3,), stride=(1,), groups=2");
  Conv1d plain(2, 4, 5, 2, 1, 3, 1, false);
  EXPECT_EQ(plain.extra_repr(), "2, 4, kernel_size=(5,), stride=(2,), padding=(1,), dilation=(3,), bias=False");
  EXPECT_FALSE(plain.bias.defined());
}

TEST(Conv1dLayer, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  cases.push_back({.name = "Conv1d(3, 4, 3)",
                   .module = conv64(3, 4, 3),
                   .torch_module = "nn.Conv1d(3, 4, 3)",
                   .inputs = {leaf({2, 3, 9}, 1)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "Conv1d stride 2, padding 2, dilation 2",
                   .module = conv64(2, 5, 3, 2, 2, 2),
                   .torch_module = "nn.Conv1d(2, 5, 3, stride=2, padding=2, dilation=2)",
                   .inputs = {leaf({3, 2, 11}, 2)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "Conv1d grouped, no bias",
                   .module = conv64(4, 6, 2, 1, 1, 1, 2, false),
                   .torch_module = "nn.Conv1d(4, 6, 2, padding=1, groups=2, bias=False)",
                   .inputs = {leaf({2, 4, 6}, 3)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "Conv1d unbatched (C, L)",
                   .module = conv64(3, 2, 4, 1, 0, 1),
                   .torch_module = "nn.Conv1d(3, 2, 4)",
                   .inputs = {leaf({3, 7}, 4)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "F::conv1d, depthwise, weight and bias as inputs",
                   .inputs = {leaf({2, 3, 8}, 5), leaf({3, 1, 3}, 6), leaf({3}, 7)},
                   .python = "outs = [F.conv1d(in0, in1, in2, stride=3, padding=1, groups=3)]",
                   .kiln = [](const TensorList& in) {
                     return TensorList{F::conv1d(in[0], in[1], in[2], 3, 1, 1, 3)};
                   }});
  expect_matches_torch(cases);
}

TEST(Conv1dLayer, Gradcheck) {
  expect_gradcheck([](const TensorList& in) { return TensorList{F::conv1d(in[0], in[1], in[2], 2, 1, 2)}; },
                   {leaf({2, 2, 7}, 8), leaf({3, 2, 3}, 9), leaf({3}, 10)});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::conv1d(in[0], in[1], Tensor(), 1, 0, 1, 2)}; },
                   {leaf({4, 5}, 11), leaf({2, 2, 2}, 12)});
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) { return TensorList{F::conv1d(in[0], in[1], in[2], 2, 1)}; },
      {leaf({1, 2, 6}, 13), leaf({2, 2, 3}, 14), leaf({2}, 15)});
}

TEST(Conv1dLayer, Errors) {
  expect_error([] { Conv1d(6, 8, 3, 1, 0, 1, 4); }, "Conv1d: in_channels (6) must be divisible by groups (4)");
  expect_error([] { Conv1d(4, 6, 3, 1, 0, 1, 4); }, "Conv1d: out_channels (6) must be divisible by groups (4)");
  expect_error([] { Conv1d(4, 6, 0); }, "Conv1d: kernel_size, stride and dilation must be positive");
  expect_error([] { Conv1d(4, 6, 3, 1, -1); }, "Conv1d: padding must be >= 0, got -1");
  auto conv = conv64(3, 4, 3);
  expect_error([&] { (*conv)(uniform64({2, 3, 4, 4}, 1)); }, "Conv1d: expected input of shape (N, C, L) or (C, L), got 4D");
  expect_error([&] { (*conv)(uniform64({2, 5, 9}, 1)); }, "Conv1d: expected 3 input channels, got input of shape [2, 5, 9]");
  expect_error([&] { (*conv)(uniform64({2, 3, 2}, 1)); }, "conv1d: kernel 3 with dilation 1 spans 3 positions");
  expect_error([] { F::conv1d(uniform64({2, 3, 5}, 1), uniform64({4, 3, 2, 2}, 2)); },
               "conv1d: expected a 3-d weight (OC, C/groups, k)");
  expect_error([] { F::conv1d(uniform64({2, 3, 5}, 1), uniform64({4, 2, 2}, 2)); },
               "conv1d: x of shape [2, 3, 5] has 3 channels, but weight of shape [4, 2, 2] with groups=1 expects 2");
}

}  // namespace
}  // namespace kiln::nn
