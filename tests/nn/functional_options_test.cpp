// The functional ops' and losses' option builders (nn/functional_options.h):
// every builder's defaults are those of the plain form, each setter reaches
// the op (the result equals the plain call with the same settings), the
// loss modules take them, and the plain forms' errors come through.
#include <gtest/gtest.h>

#include "autograd/autograd_test_util.h"
#include "kiln.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::uniform64;
using testing::expect_error;
using testing::values_of;

void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(values_of(a), values_of(b));
}

TEST(FunctionalOptions, Losses) {
  Tensor logits = uniform64({4, 3}, 1);
  Tensor labels = from_vector<int64_t>({0, 2, 1, 2}, {4});
  Tensor weight = uniform64({3}, 2, 0.5, 2);
  // Defaults: those of the structs.
  const CrossEntropyLossOptions d;
  const F::CrossEntropyOptions plain;
  EXPECT_FALSE(d.weight().defined());
  EXPECT_EQ(d.ignore_index(), plain.ignore_index);
  EXPECT_EQ(d.reduction(), plain.reduction);
  EXPECT_EQ(d.label_smoothing(), plain.label_smoothing);
  const F::CrossEntropyFuncOptions o =
      F::CrossEntropyFuncOptions().weight(weight).ignore_index(1).reduction(F::Reduction::Sum).label_smoothing(0.2);
  expect_equal(
      F::cross_entropy(logits, labels, o),
      F::cross_entropy(logits, labels,
                       {.weight = weight, .ignore_index = 1, .reduction = F::Reduction::Sum, .label_smoothing = 0.2}));
  CrossEntropyLoss module(CrossEntropyLossOptions().label_smoothing(0.1).ignore_index(2));
  EXPECT_EQ(module.options.label_smoothing, 0.1);
  EXPECT_EQ(module.options.ignore_index, 2);
  expect_equal(module(logits, labels), F::cross_entropy(logits, labels, {.ignore_index = 2, .label_smoothing = 0.1}));
  // A weight given through the builder is the module's buffer, as torch.
  CrossEntropyLoss weighted(CrossEntropyLossOptions().weight(weight));
  EXPECT_EQ(weighted.state_dict().keys(), std::vector<std::string>{"weight"});

  Tensor logp = F::log_softmax(logits, 1);
  NLLLoss nll(NLLLossOptions().reduction(F::Reduction::None).ignore_index(0));
  expect_equal(nll(logp, labels), F::nll_loss(logp, labels, {.ignore_index = 0, .reduction = F::Reduction::None}));
  expect_equal(F::nll_loss(logp, labels, F::NLLLossFuncOptions().weight(weight)),
               F::nll_loss(logp, labels, {.weight = weight}));

  Tensor y = uniform64({4, 3}, 3), t = uniform64({4, 3}, 4);
  EXPECT_EQ(MSELossOptions().reduction(), F::Reduction::Mean);
  expect_equal(F::mse_loss(y, t, F::MSELossFuncOptions().reduction(F::Reduction::Sum)),
               F::mse_loss(y, t, F::Reduction::Sum));
  expect_equal(F::mse_loss(y, t, F::MSELossFuncOptions(F::Reduction::None)), F::mse_loss(y, t, F::Reduction::None));
  expect_equal(MSELoss(MSELossOptions(F::Reduction::Sum))(y, t), F::mse_loss(y, t, F::Reduction::Sum));
  expect_equal(L1Loss(L1LossOptions().reduction(F::Reduction::None))(y, t), F::l1_loss(y, t, F::Reduction::None));
  expect_equal(F::l1_loss(y, t, F::L1LossFuncOptions()), F::l1_loss(y, t));

  Tensor target = uniform64({4, 3}, 5, 0, 1), pos = uniform64({3}, 6, 0.5, 2);
  BCEWithLogitsLoss bce(BCEWithLogitsLossOptions().pos_weight(pos).reduction(F::Reduction::Sum));
  EXPECT_EQ(bce.state_dict().keys(), std::vector<std::string>{"pos_weight"});
  expect_equal(bce(y, target),
               F::binary_cross_entropy_with_logits(y, target, {.pos_weight = pos, .reduction = F::Reduction::Sum}));
  expect_equal(
      F::binary_cross_entropy_with_logits(y, target, F::BinaryCrossEntropyWithLogitsFuncOptions().weight(target)),
      F::binary_cross_entropy_with_logits(y, target, {.weight = target}));
  // The plain forms' checks come through.
  expect_error([&] { F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().label_smoothing(2)); },
               "label_smoothing");
}

TEST(FunctionalOptions, PadAndInterpolate) {
  Tensor x = uniform64({2, 3, 4, 5}, 1);
  EXPECT_EQ(F::PadFuncOptions({1, 1}).mode(), F::PadMode::Constant);
  EXPECT_FALSE(F::PadFuncOptions({1, 1}).value().has_value());
  expect_equal(F::pad(x, F::PadFuncOptions({1, 2, 0, 3})), F::pad(x, {1, 2, 0, 3}));
  expect_equal(F::pad(x, F::PadFuncOptions({1, 2}).value(0.5)), F::pad(x, {1, 2}, F::PadMode::Constant, 0.5));
  expect_equal(F::pad(x, F::PadFuncOptions({1, 2, 3, 0}).mode(F::PadMode::Reflect)),
               F::pad(x, {1, 2, 3, 0}, F::PadMode::Reflect));
  expect_error(
      [&] {
        F::pad(x, F::PadFuncOptions({1, 1}).mode(F::PadMode::Circular).value(1));
      },
      "pad: circular padding takes no value, got 1");

  const F::InterpolateFuncOptions d;
  const F::InterpolateOptions plain;
  EXPECT_TRUE(d.size().empty());
  EXPECT_TRUE(d.scale_factor().empty());
  EXPECT_EQ(d.mode(), plain.mode);
  EXPECT_FALSE(d.align_corners().has_value());
  EXPECT_FALSE(d.recompute_scale_factor().has_value());
  expect_equal(
      F::interpolate(x, F::InterpolateFuncOptions().size({7, 3}).mode(F::InterpolateMode::Bicubic).align_corners(true)),
      F::interpolate(x, {.size = {7, 3}, .mode = F::InterpolateMode::Bicubic, .align_corners = true}));
  expect_equal(F::interpolate(x, F::InterpolateFuncOptions().scale_factor({1.5}).recompute_scale_factor(true)),
               F::interpolate(x, {.scale_factor = {1.5}, .recompute_scale_factor = true}));
  // nn::UpsampleOptions is the builder, as LibTorch's.
  Upsample up(UpsampleOptions().scale_factor({2}).mode(F::InterpolateMode::Bilinear));
  EXPECT_EQ(up.extra_repr(), "scale_factor=2.0, mode='bilinear'");
  expect_equal(up(x), F::interpolate(x, {.scale_factor = {2}, .mode = F::InterpolateMode::Bilinear}));
  expect_error([] { Upsample(UpsampleOptions().size({4}).scale_factor({2})); },
               "Upsample: give exactly one of size and scale_factor");
}

TEST(FunctionalOptions, Convolutions) {
  Tensor x = uniform64({2, 4, 6, 5}, 1), w = uniform64({6, 2, 3, 3}, 2), b = uniform64({6}, 3);
  expect_equal(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(2).padding({1, 0}).dilation({1, 2}).groups(2)),
               F::conv2d(x, w, b, 2, Size2d(1, 0), Size2d(1, 2), 2));
  expect_equal(F::conv2d(x, uniform64({3, 4, 3, 3}, 4), F::Conv2dFuncOptions()),
               F::conv2d(x, uniform64({3, 4, 3, 3}, 4)));
  Tensor seq = uniform64({2, 4, 9}, 5), w1 = uniform64({4, 1, 3}, 6);
  expect_equal(
      F::conv1d(seq, w1, F::Conv1dFuncOptions().stride(2).padding(1).dilation(2).groups(4).bias(b.narrow(0, 0, 4))),
      F::conv1d(seq, w1, b.narrow(0, 0, 4), 2, 1, 2, 4));
  Tensor wt = uniform64({4, 3, 3, 2}, 7);
  expect_equal(
      F::conv_transpose2d(x, wt, F::ConvTranspose2dFuncOptions().stride(2).padding(1).output_padding({1, 0}).groups(2)),
      F::conv_transpose2d(x, wt, Tensor(), 2, 1, Size2d(1, 0), 2));
  expect_error([&] { F::conv2d(x, w, F::Conv2dFuncOptions().groups(3)); }, "conv2d");
  // The pooling builders are the layers'.
  expect_equal(F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1)),
               F::max_pool2d(x, {.kernel = 3, .stride = Size2d(2), .padding = 1}));
  expect_equal(F::avg_pool2d(x, F::AvgPool2dFuncOptions(2).count_include_pad(false).padding(1)),
               F::avg_pool2d(x, {.kernel = 2, .padding = 1, .count_include_pad = false}));
}

TEST(FunctionalOptions, NormalizationActivationsDropoutEmbedding) {
  Tensor x = uniform64({3, 4, 5}, 1), w = uniform64({4}, 2), b = uniform64({4}, 3);
  Tensor mean = uniform64({4}, 4), variance = uniform64({4}, 5, 0.5, 2);
  const F::BatchNormFuncOptions bn;
  EXPECT_FALSE(bn.training());
  EXPECT_EQ(bn.momentum(), 0.1);
  EXPECT_EQ(bn.eps(), 1e-5);
  expect_equal(F::batch_norm(x, mean, variance, F::BatchNormFuncOptions().weight(w).bias(b).eps(1e-3)),
               F::batch_norm(x, mean, variance, w, b, false, 0.1, 1e-3));
  // Training updates the running statistics as the plain form does.
  Tensor m1 = mean.clone(), v1 = variance.clone(), m2 = mean.clone(), v2 = variance.clone();
  expect_equal(F::batch_norm(x, m1, v1, F::BatchNormFuncOptions().training(true).momentum(0.3)),
               F::batch_norm(x, m2, v2, Tensor(), Tensor(), true, 0.3));
  expect_equal(m1, m2);
  expect_equal(v1, v2);
  expect_equal(F::layer_norm(x, F::LayerNormFuncOptions({5}).eps(1e-3)),
               F::layer_norm(x, {5}, Tensor(), Tensor(), 1e-3));
  Tensor lw = uniform64({4, 5}, 6);
  expect_equal(F::layer_norm(x, F::LayerNormFuncOptions({4, 5}).weight(lw)), F::layer_norm(x, {4, 5}, lw));
  expect_equal(F::group_norm(x, F::GroupNormFuncOptions(2).weight(w).bias(b)), F::group_norm(x, 2, w, b));
  expect_equal(F::instance_norm(x, F::InstanceNormFuncOptions().weight(w).eps(1e-4)),
               F::instance_norm(x, Tensor(), Tensor(), w, Tensor(), true, 0.1, 1e-4));
  expect_equal(
      F::instance_norm(x, F::InstanceNormFuncOptions().running_mean(mean).running_var(variance).use_input_stats(false)),
      F::instance_norm(x, mean, variance, Tensor(), Tensor(), false));
  expect_error([&] { F::group_norm(x, F::GroupNormFuncOptions(3)); }, "group_norm: the 4 channels");

  EXPECT_EQ(F::LeakyReLUFuncOptions().negative_slope(), 0.01);
  expect_equal(F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.2)), F::leaky_relu(x, 0.2));
  expect_equal(F::gelu(x, F::GELUFuncOptions().approximate(F::GeluApproximation::Tanh)),
               F::gelu(x, F::GeluApproximation::Tanh));
  expect_equal(F::gelu(x, F::GELUFuncOptions()), F::gelu(x));
  expect_equal(F::softmax(x, F::SoftmaxFuncOptions(1)), F::softmax(x, 1));
  expect_equal(F::log_softmax(x, F::LogSoftmaxFuncOptions(-1)), F::log_softmax(x, -1));

  const F::DropoutFuncOptions drop;
  EXPECT_EQ(drop.p(), 0.5);
  EXPECT_TRUE(drop.training());
  Generator ga(4), gb(4);
  expect_equal(F::dropout(x, F::DropoutFuncOptions().p(0.3).generator(&ga)), F::dropout(x, 0.3, true, &gb));
  expect_equal(F::dropout(x, F::DropoutFuncOptions().training(false)), x);

  Tensor table = uniform64({6, 3}, 7);
  Tensor ids = from_vector<int64_t>({0, 5, 2}, {3});
  EXPECT_FALSE(F::EmbeddingFuncOptions().padding_idx().has_value());
  expect_equal(F::embedding(ids, table, F::EmbeddingFuncOptions().padding_idx(5)), F::embedding(ids, table, 5));
}

}  // namespace
}  // namespace kiln::nn
