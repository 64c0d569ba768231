// The layers of nn/: parameter and buffer names and shapes, default
// initialisation as torch's reset_parameters, forward against the
// functional ops, modes (BatchNorm, Dropout), printing as torch prints, and
// constructor errors.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/nn_test_util.h"
#include "nn/normalization.h"
#include "nn/pooling.h"
#include "nn/repr.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using testing::expect_error;
using testing::values_of;

std::string printed(const Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

// Every value within [-bound, bound] and, for 100 values or more, the
// extremes beyond 0.8 * bound, so that the draws fill the interval rather
// than a narrower one (each side misses with probability 0.9^100 < 3e-5;
// the tests seed the generator, so they are deterministic anyway).
void expect_uniform_within(const Tensor& t, double bound) {
  std::vector<double> v = values_of(t);
  double lo = 0, hi = 0;
  for (double x : v) {
    EXPECT_LE(std::abs(x), bound);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  if (v.size() >= 100) {
    EXPECT_LT(lo, -0.8 * bound);
    EXPECT_GT(hi, 0.8 * bound);
  }
}

void expect_close(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  ASSERT_EQ(a.shape(), b.shape());
  std::vector<double> va = values_of(a), vb = values_of(b);
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], tol) << "element " << i;
}

TEST(ReprFormat, PythonFloatsTuplesAndBools) {
  EXPECT_EQ(repr::floating(1e-5), "1e-05");
  EXPECT_EQ(repr::floating(0.1), "0.1");
  EXPECT_EQ(repr::floating(1.0), "1.0");
  EXPECT_EQ(repr::floating(0.0001), "0.0001");
  EXPECT_EQ(repr::floating(1234.5), "1234.5");
  EXPECT_EQ(repr::floating(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(repr::floating(1e16), "1e+16");
  EXPECT_EQ(repr::floating(0.01), "0.01");
  EXPECT_EQ(repr::tuple({768}), "(768,)");
  EXPECT_EQ(repr::tuple({2, 3}), "(2, 3)");
  EXPECT_EQ(repr::boolean(true), "True");
  EXPECT_EQ(repr::int_or_pair(Size2d(3, 2)), "(3, 2)");
}

// ---- Linear ----

TEST(LinearLayer, ParametersInitAndForward) {
  kiln::manual_seed(1);
  auto fc = std::make_shared<Linear>(400, 120);
  TensorDict params = fc->named_parameters();
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(fc->weight.shape(), (Shape{120, 400}));
  EXPECT_EQ(fc->bias.shape(), (Shape{120}));
  EXPECT_TRUE(fc->weight.requires_grad());
  expect_uniform_within(fc->weight, 1.0 / std::sqrt(400.0));
  expect_uniform_within(fc->bias, 1.0 / std::sqrt(400.0));

  Tensor x = kiln::randn({3, 400});
  Tensor y = (*fc)(x);
  EXPECT_EQ(y.shape(), (Shape{3, 120}));
  expect_close(y, ops::add(ops::matmul(x, fc->weight.t()), fc->bias), 1e-5);
  EXPECT_EQ((*fc)(kiln::randn({2, 5, 400})).shape(), (Shape{2, 5, 120}));
}

TEST(LinearLayer, WithoutBiasAndPrinting) {
  auto fc = std::make_shared<Linear>(4, 3, /*bias=*/false);
  EXPECT_EQ(fc->named_parameters().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_FALSE(fc->bias.defined());
  EXPECT_EQ(printed(*fc), "Linear(in_features=4, out_features=3, bias=False)");
  EXPECT_EQ(printed(Linear(84, 10)), "Linear(in_features=84, out_features=10, bias=True)");
  expect_error([] { Linear(-1, 3); }, "Linear: in_features and out_features must be >= 0, got -1 and 3");
}

TEST(LinearLayer, BackwardReachesBothParameters) {
  auto fc = std::make_shared<Linear>(5, 2);
  kiln::sum((*fc)(kiln::randn({4, 5}))).backward();
  EXPECT_EQ(fc->weight.grad().shape(), (Shape{2, 5}));
  expect_close(fc->bias.grad(), kiln::full({2}, 4.0));
}

// ---- Conv2d ----

TEST(Conv2dLayer, ParametersInitAndForward) {
  kiln::manual_seed(2);
  auto conv = std::make_shared<Conv2d>(6, 16, 5);
  EXPECT_EQ(conv->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv->weight.shape(), (Shape{16, 6, 5, 5}));
  EXPECT_EQ(conv->bias.shape(), (Shape{16}));
  expect_uniform_within(conv->weight, 1.0 / std::sqrt(150.0));
  expect_uniform_within(conv->bias, 1.0 / std::sqrt(150.0));
  Tensor x = kiln::randn({2, 6, 14, 14});
  Tensor y = (*conv)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 16, 10, 10}));
  expect_close(y, F::conv2d(x, conv->weight, conv->bias));
}

TEST(Conv2dLayer, OptionsReachTheConvolution) {
  kiln::manual_seed(3);
  auto conv = std::make_shared<Conv2d>(4, 6, Size2d(3, 2), /*stride=*/2, /*padding=*/Size2d(1, 0), /*dilation=*/1,
                                       /*groups=*/2, /*bias=*/false);
  EXPECT_EQ(conv->weight.shape(), (Shape{6, 2, 3, 2}));
  expect_uniform_within(conv->weight, 1.0 / std::sqrt(2.0 * 3 * 2));
  Tensor x = kiln::randn({1, 4, 7, 8});
  expect_close((*conv)(x), F::conv2d(x, conv->weight, Tensor(), 2, Size2d(1, 0), 1, 2));
  EXPECT_EQ(printed(*conv), "Conv2d(4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 0), groups=2, bias=False)");
  EXPECT_EQ(printed(Conv2d(3, 6, 5)), "Conv2d(3, 6, kernel_size=(5, 5), stride=(1, 1))");
  EXPECT_EQ(printed(Conv2d(3, 6, 3, 1, 2, 2)),
            "Conv2d(3, 6, kernel_size=(3, 3), stride=(1, 1), padding=(2, 2), dilation=(2, 2))");
}

TEST(Conv2dLayer, ConstructorErrors) {
  expect_error([] { Conv2d(3, 6, 3, 1, 0, 1, 2); }, "Conv2d: in_channels (3) must be divisible by groups (2)");
  expect_error([] { Conv2d(4, 6, 3, 1, 0, 1, 4); }, "Conv2d: out_channels (6) must be divisible by groups (4)");
  expect_error([] { Conv2d(4, 6, 3, 1, 0, 1, 0); }, "Conv2d: groups must be a positive integer, got 0");
  expect_error([] { Conv2d(4, 6, 0); }, "Conv2d: kernel_size, stride and dilation must be positive, got (0, 0)");
  expect_error([] { Conv2d(4, 6, 3, 1, -1); }, "Conv2d: padding must be >= 0, got (-1, -1)");
}

// ---- pooling ----

TEST(PoolingLayers, ForwardAndPrinting) {
  Tensor x = kiln::randn({2, 3, 8, 8});
  auto max = std::make_shared<MaxPool2d>(2);
  expect_close((*max)(x), F::max_pool2d(x, {.kernel = 2}), 0);
  EXPECT_EQ((*max)(x).shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(printed(*max), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  auto max_opts =
      std::make_shared<MaxPool2d>(kiln::MaxPool2dOptions{.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true});
  expect_close((*max_opts)(x), F::max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}), 0);
  EXPECT_EQ(printed(*max_opts), "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)");

  auto avg = std::make_shared<AvgPool2d>(3, 2, 1);
  expect_close((*avg)(x), F::avg_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}), 0);
  EXPECT_EQ(printed(*avg), "AvgPool2d(kernel_size=3, stride=2, padding=1)");
  auto avg_no_pad =
      std::make_shared<AvgPool2d>(kiln::AvgPool2dOptions{.kernel = 3, .padding = 1, .count_include_pad = false});
  expect_close((*avg_no_pad)(x), F::avg_pool2d(x, {.kernel = 3, .padding = 1, .count_include_pad = false}), 0);

  auto adaptive = std::make_shared<AdaptiveAvgPool2d>(Size2d(3, 1));
  EXPECT_EQ((*adaptive)(x).shape(), (Shape{2, 3, 3, 1}));
  expect_close((*adaptive)(x), F::adaptive_avg_pool2d(x, Size2d(3, 1)), 0);
  EXPECT_EQ(printed(*adaptive), "AdaptiveAvgPool2d(output_size=(3, 1))");
  EXPECT_EQ(printed(AdaptiveAvgPool2d(1)), "AdaptiveAvgPool2d(output_size=1)");
  EXPECT_TRUE(max->named_parameters().empty());
}

// ---- BatchNorm ----

TEST(BatchNormLayer, ParametersBuffersAndInit) {
  auto bn = std::make_shared<BatchNorm2d>(4);
  EXPECT_EQ(bn->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(bn->named_buffers().keys(),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(values_of(bn->weight), std::vector<double>(4, 1.0));
  EXPECT_EQ(values_of(bn->bias), std::vector<double>(4, 0.0));
  EXPECT_EQ(values_of(bn->running_mean), std::vector<double>(4, 0.0));
  EXPECT_EQ(values_of(bn->running_var), std::vector<double>(4, 1.0));
  EXPECT_EQ(bn->num_batches_tracked.dtype(), DType::Int64);
  EXPECT_EQ(bn->num_batches_tracked.dim(), 0);
  EXPECT_EQ(printed(*bn), "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  auto plain = std::make_shared<BatchNorm1d>(3, 1e-3, std::nullopt, /*affine=*/false, /*track_running_stats=*/false);
  EXPECT_TRUE(plain->named_parameters().empty());
  EXPECT_TRUE(plain->named_buffers().empty());
  EXPECT_EQ(printed(*plain), "BatchNorm1d(3, eps=0.001, momentum=None, affine=False, track_running_stats=False)");
}

TEST(BatchNormLayer, RunningStatsAfterSeveralStepsFollowTheFormula) {
  auto bn = std::make_shared<BatchNorm2d>(2, 1e-5, 0.2);
  std::vector<double> mean(2, 0.0), var(2, 1.0);
  for (int step = 0; step < 3; ++step) {
    Generator gen(step + 1);
    Tensor x = ops::add(ops::mul(kiln::randn({4, 2, 3, 3}, {}, &gen), 1.5 + step), static_cast<double>(step));
    (*bn)(x);
    // Batch statistics per channel, the variance unbiased (M = 36 values).
    std::vector<double> xv = values_of(x);
    for (int c = 0; c < 2; ++c) {
      double sum = 0, sq = 0;
      for (int n = 0; n < 4; ++n)
        for (int k = 0; k < 9; ++k) sum += xv[(n * 2 + c) * 9 + k];
      const double m = sum / 36;
      for (int n = 0; n < 4; ++n)
        for (int k = 0; k < 9; ++k) sq += std::pow(xv[(n * 2 + c) * 9 + k] - m, 2);
      mean[c] = 0.8 * mean[c] + 0.2 * m;
      var[c] = 0.8 * var[c] + 0.2 * sq / 35;
    }
  }
  std::vector<double> rm = values_of(bn->running_mean), rv = values_of(bn->running_var);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(rm[c], mean[c], 1e-5);
    EXPECT_NEAR(rv[c], var[c], 1e-4);
  }
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 3);
}

TEST(BatchNormLayer, CumulativeAverageWithoutMomentum) {
  auto bn = std::make_shared<BatchNorm1d>(1, 1e-5, std::nullopt);
  // Batch means 1, 3, 8: the running mean is their plain average.
  for (double shift : {1.0, 3.0, 8.0}) (*bn)(ops::add(from_vector<float>({-1, 1, 0}, {3, 1}), shift));
  EXPECT_NEAR(values_of(bn->running_mean)[0], 4.0, 1e-6);
  EXPECT_NEAR(values_of(bn->running_var)[0], 1.0, 1e-6);  // each batch's unbiased variance is 1
}

TEST(BatchNormLayer, EvalUsesRunningStatsAndLeavesThem) {
  auto bn = std::make_shared<BatchNorm1d>(3);
  (*bn)(kiln::randn({8, 3}));
  (*bn)(kiln::randn({8, 3, 2}));
  bn->eval();
  std::vector<double> rm = values_of(bn->running_mean), rv = values_of(bn->running_var);
  Tensor x = kiln::randn({5, 3});
  Tensor y = (*bn)(x);
  std::vector<double> xv = values_of(x), yv = values_of(y);
  for (int n = 0; n < 5; ++n)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(yv[n * 3 + c], (xv[n * 3 + c] - rm[c]) / std::sqrt(rv[c] + 1e-5), 1e-5);
  EXPECT_EQ(values_of(bn->running_mean), rm);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  // A single example is fine in eval (no batch statistics needed).
  EXPECT_EQ((*bn)(kiln::randn({1, 3})).shape(), (Shape{1, 3}));
}

TEST(BatchNormLayer, WithoutRunningStatsEvalUsesBatchStats) {
  auto bn = std::make_shared<BatchNorm2d>(2, 1e-5, 0.1, true, false);
  bn->eval();
  Tensor x = kiln::randn({3, 2, 2, 2});
  expect_close((*bn)(x), F::batch_norm(x, Tensor(), Tensor(), bn->weight, bn->bias, true), 1e-6);
}

TEST(BatchNormLayer, GradientsReachWeightAndBias) {
  auto bn = std::make_shared<BatchNorm2d>(3);
  Tensor x = kiln::randn({2, 3, 4, 4}).requires_grad_();
  kiln::sum(kiln::mul((*bn)(x), kiln::randn({2, 3, 4, 4}))).backward();
  EXPECT_EQ(bn->weight.grad().shape(), (Shape{3}));
  EXPECT_EQ(bn->bias.grad().shape(), (Shape{3}));
  EXPECT_EQ(x.grad().shape(), x.shape());
}

TEST(BatchNormLayer, InputErrors) {
  auto bn2 = std::make_shared<BatchNorm2d>(3);
  expect_error(
      [&] {
        (*bn2)(kiln::zeros({2, 3}));
      },
      "BatchNorm2d: expected 4D input (N, C, H, W), got 2D input of shape [2, 3]");
  expect_error(
      [&] {
        (*bn2)(kiln::zeros({2, 4, 2, 2}));
      },
      "BatchNorm2d: expected 3 channels (dim 1), got input of shape [2, 4, 2, 2]");
  auto bn1 = std::make_shared<BatchNorm1d>(3);
  expect_error(
      [&] {
        (*bn1)(kiln::zeros({2, 3, 2, 2}));
      },
      "BatchNorm1d: expected 2D or 3D input (N, C) or (N, C, L), got 4D");
  expect_error(
      [&] {
        (*bn1)(kiln::zeros({1, 3}));
      },
      "batch_norm: expected more than 1 value per channel when training");
  expect_error([] { BatchNorm2d(0); }, "BatchNorm: num_features must be positive, got 0");
}

// ---- LayerNorm ----

TEST(LayerNormLayer, ParametersForwardAndPrinting) {
  auto ln = std::make_shared<LayerNorm>(Shape{3, 4}, 1e-6);
  EXPECT_EQ(ln->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(ln->weight.shape(), (Shape{3, 4}));
  EXPECT_EQ(values_of(ln->weight), std::vector<double>(12, 1.0));
  EXPECT_EQ(values_of(ln->bias), std::vector<double>(12, 0.0));
  Tensor x = kiln::randn({2, 3, 4});
  expect_close((*ln)(x), F::layer_norm(x, {3, 4}, ln->weight, ln->bias, 1e-6), 0);
  EXPECT_EQ(printed(*ln), "LayerNorm((3, 4), eps=1e-06, elementwise_affine=True)");
  EXPECT_EQ(printed(LayerNorm(768)), "LayerNorm((768,), eps=1e-05, elementwise_affine=True)");
  auto no_bias = std::make_shared<LayerNorm>(8, 1e-5, true, /*bias=*/false);
  EXPECT_EQ(no_bias->named_parameters().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_TRUE(std::make_shared<LayerNorm>(8, 1e-5, false)->named_parameters().empty());
  expect_error([] { LayerNorm(Shape{}); }, "LayerNorm: normalized_shape must have at least one dim");
}

// ---- Dropout ----

TEST(DropoutLayer, EvalIsIdentityAndTrainingScales) {
  Generator gen(9);
  auto drop = std::make_shared<Dropout>(0.2, &gen);
  Tensor x = kiln::ones({50, 40});
  std::vector<double> yv = values_of((*drop)(x));
  int64_t kept = 0;
  for (double v : yv) {
    if (v != 0.0) {
      EXPECT_NEAR(v, 1.25, 1e-6);  // 1 / (1 - 0.2)
      ++kept;
    }
  }
  EXPECT_NEAR(static_cast<double>(kept), 1600.0, 100.0);  // 2000 draws, keep 0.8: sigma 18
  drop->eval();
  EXPECT_TRUE((*drop)(x).is_same(x));
  EXPECT_EQ(printed(*drop), "Dropout(p=0.2, inplace=False)");
  expect_error([] { Dropout(1.2); }, "Dropout: the probability p must be in [0, 1], got 1.2");
}

// ---- activations, Flatten, Identity ----

TEST(ActivationLayers, ForwardAndPrinting) {
  Tensor x = kiln::randn({3, 4});
  expect_close((*std::make_shared<ReLU>())(x), F::relu(x), 0);
  expect_close((*std::make_shared<LeakyReLU>(0.3))(x), F::leaky_relu(x, 0.3), 0);
  expect_close((*std::make_shared<GELU>(F::GeluApproximation::Tanh))(x), F::gelu(x, F::GeluApproximation::Tanh), 0);
  expect_close((*std::make_shared<Sigmoid>())(x), F::sigmoid(x), 0);
  expect_close((*std::make_shared<Tanh>())(x), F::tanh(x), 0);
  expect_close((*std::make_shared<Softmax>(0))(x), F::softmax(x, 0), 0);
  expect_close((*std::make_shared<LogSoftmax>(-1))(x), F::log_softmax(x, -1), 0);
  EXPECT_EQ(printed(ReLU()), "ReLU()");
  EXPECT_EQ(printed(LeakyReLU()), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(printed(GELU()), "GELU(approximate='none')");
  EXPECT_EQ(printed(GELU(F::GeluApproximation::Tanh)), "GELU(approximate='tanh')");
  EXPECT_EQ(printed(Softmax(1)), "Softmax(dim=1)");
  EXPECT_EQ(printed(Sigmoid()), "Sigmoid()");
}

TEST(FlattenAndIdentity, ShapesAndPrinting) {
  Tensor x = kiln::randn({2, 16, 5, 5});
  EXPECT_EQ((*std::make_shared<Flatten>())(x).shape(), (Shape{2, 400}));
  EXPECT_EQ((*std::make_shared<Flatten>(0, 1))(x).shape(), (Shape{32, 5, 5}));
  EXPECT_EQ(printed(Flatten()), "Flatten(start_dim=1, end_dim=-1)");
  EXPECT_TRUE((*std::make_shared<Identity>())(x).is_same(x));
  EXPECT_EQ(printed(Identity()), "Identity()");
}

// ---- Embedding ----

TEST(EmbeddingLayer, InitPaddingRowAndForward) {
  auto emb = std::make_shared<Embedding>(1000, 8, /*padding_idx=*/-1);
  EXPECT_EQ(emb->padding_idx, 999);
  EXPECT_EQ(emb->named_parameters().keys(), (std::vector<std::string>{"weight"}));
  std::vector<double> w = values_of(emb->weight);
  double mean = 0, sq = 0;
  for (size_t i = 0; i < 999 * 8; ++i) mean += w[i] / (999 * 8);
  for (size_t i = 0; i < 999 * 8; ++i) sq += (w[i] - mean) * (w[i] - mean) / (999 * 8);
  EXPECT_NEAR(mean, 0.0, 0.05);  // N(0, 1): standard error 0.011
  EXPECT_NEAR(std::sqrt(sq), 1.0, 0.05);
  for (size_t i = 999 * 8; i < w.size(); ++i) EXPECT_EQ(w[i], 0.0);

  Tensor ids = from_vector<int64_t>({5, 999, 5}, {3});
  Tensor y = (*emb)(ids);
  EXPECT_EQ(y.shape(), (Shape{3, 8}));
  kiln::sum(y).backward();
  std::vector<double> g = values_of(emb->weight.grad());
  EXPECT_EQ(g[5 * 8], 2.0);
  EXPECT_EQ(g[999 * 8], 0.0);
  EXPECT_EQ(printed(*emb), "Embedding(1000, 8, padding_idx=999)");
  EXPECT_EQ(printed(Embedding(10, 3)), "Embedding(10, 3)");
  expect_error([] { Embedding(10, 3, 10); }, "Embedding: padding_idx must be within [-10, 10), got 10");
}

// ---- losses ----

TEST(LossModules, MatchTheFunctionsAndRegisterWeightsAsBuffers) {
  Tensor logits = kiln::randn({4, 3});
  Tensor target = from_vector<int64_t>({0, 2, 1, 2}, {4});
  Tensor weight = from_vector<float>({0.5, 1, 2}, {3});
  CrossEntropyLoss ce({.weight = weight, .label_smoothing = 0.1});
  expect_close(ce(logits, target), F::cross_entropy(logits, target, {.weight = weight, .label_smoothing = 0.1}), 0);
  EXPECT_EQ(ce.named_buffers().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_TRUE(CrossEntropyLoss().named_buffers().empty());
  EXPECT_EQ(printed(ce), "CrossEntropyLoss()");

  Tensor logp = F::log_softmax(logits, 1);
  NLLLoss nll({.ignore_index = 1, .reduction = F::Reduction::Sum});
  expect_close(nll(logp, target), F::nll_loss(logp, target, {.ignore_index = 1, .reduction = F::Reduction::Sum}), 0);

  Tensor a = kiln::randn({5}), b = kiln::randn({5});
  expect_close(MSELoss()(a, b), F::mse_loss(a, b), 0);
  expect_close(L1Loss(F::Reduction::None)(a, b), F::l1_loss(a, b, F::Reduction::None), 0);
  BCEWithLogitsLoss bce({.pos_weight = kiln::full({5}, 2.0)});
  Tensor y = kiln::rand({5});
  expect_close(bce(a, y), F::binary_cross_entropy_with_logits(a, y, {.pos_weight = kiln::full({5}, 2.0)}), 0);
  EXPECT_EQ(bce.named_buffers().keys(), (std::vector<std::string>{"pos_weight"}));
}

TEST(LossModules, OneTensorForwardIsRefused) {
  auto loss = std::make_shared<MSELoss>();
  Module& as_module = *loss;
  expect_error([&] { as_module(kiln::zeros({2})); }, "MSELoss");
}

// ---- printing a model ----

TEST(LayerPrinting, SequentialReadsLikeTorch) {
  auto net = std::make_shared<Sequential>(std::make_shared<Conv2d>(1, 4, 3, 1, 1), std::make_shared<BatchNorm2d>(4),
                                          std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
                                          std::make_shared<Flatten>(), std::make_shared<Dropout>(0.1),
                                          std::make_shared<Linear>(64, 10));
  EXPECT_EQ(printed(*net),
            "Sequential(\n"
            "  (0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (1): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
            "  (2): ReLU()\n"
            "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
            "  (4): Flatten(start_dim=1, end_dim=-1)\n"
            "  (5): Dropout(p=0.1, inplace=False)\n"
            "  (6): Linear(in_features=64, out_features=10, bias=True)\n"
            ")");
  EXPECT_EQ((*net)(kiln::randn({2, 1, 8, 8})).shape(), (Shape{2, 10}));
}

}  // namespace
}  // namespace kiln::nn
