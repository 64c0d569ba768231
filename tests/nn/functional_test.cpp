// nn::functional: activations, conv2d, pooling, dropout and embedding.
// Forward values against float64 loops written here, gradients by finite
// differences (gradcheck) and second derivatives (gradgradcheck) for the ops
// whose backward is a kernel (Note [Backward kernels and double backward]).
#include "nn/functional.h"

#include <cmath>

#include "autograd/autograd_test_util.h"

namespace kiln::gradtest {
namespace {

namespace F = kiln::nn::functional;

// ---- activations ----

TEST(FunctionalActivation, LeakyReluValuesAndSlopeAtZero) {
  Tensor x = leaf_of({-2.0, -0.5, 0.0, 0.5, 3.0}, {5});
  Tensor y = F::leaky_relu(x, 0.1);
  expect_values(y, {-0.2, -0.05, 0.0, 0.5, 3.0});
  kiln::sum(y).backward();
  // As torch: the gradient at 0 takes the negative side's slope.
  expect_values(x.grad(), {0.1, 0.1, 0.1, 1.0, 1.0});
  EXPECT_EQ(y.grad_fn_name(), "LeakyReluBackward");
}

TEST(FunctionalActivation, LeakyReluGradcheckAndGradgradcheck) {
  auto fn = [](const TensorList& in) { return TensorList{F::leaky_relu(in[0], 0.2)}; };
  expect_gradcheck(fn, {leaf({3, 4}, 1)});
  expect_gradcheck(fn, {transposed_leaf({3, 4}, 2)});
  expect_gradgradcheck(fn, {leaf({2, 3}, 3)});
}

TEST(FunctionalActivation, LeakyReluRejectsIntegers) {
  expect_error([] { F::leaky_relu(kiln::arange(4)); }, "leaky_relu: expected a floating tensor, got int64");
}

TEST(FunctionalActivation, WrappersMatchTheAutogradOps) {
  Tensor x = uniform64({3, 5}, 4, -3, 3);
  expect_same(F::relu(x), kiln::relu(x));
  expect_same(F::sigmoid(x), kiln::sigmoid(x));
  expect_same(F::tanh(x), kiln::tanh(x));
  expect_same(F::gelu(x), kiln::gelu(x, false));
  expect_same(F::gelu(x, F::GeluApproximation::Tanh), kiln::gelu(x, true));
  expect_same(F::softmax(x, 1), kiln::softmax(x, 1));
  expect_same(F::log_softmax(x, 0), kiln::log_softmax(x, 0));
  auto fn = [](const TensorList& in) {
    return TensorList{F::gelu(in[0], F::GeluApproximation::Tanh), F::log_softmax(in[0], -1)};
  };
  expect_gradcheck(fn, {leaf({2, 4}, 5)});
}

TEST(FunctionalActivation, FlattenIsAViewAndDifferentiable) {
  Tensor x = leaf({2, 3, 4, 5}, 6);
  Tensor y = F::flatten(x, 1);
  EXPECT_EQ(y.shape(), (Shape{2, 60}));
  EXPECT_EQ(F::flatten(x).shape(), (Shape{120}));
  EXPECT_EQ(F::flatten(x, 1, 2).shape(), (Shape{2, 12, 5}));
  expect_gradcheck([](const TensorList& in) { return TensorList{F::flatten(in[0], 1)}; },
                   {transposed_leaf({2, 3, 4}, 7)});
}

// ---- conv2d ----

struct ConvCase {
  const char* name;
  Shape x, w;
  bool bias;
  Size2d stride, padding, dilation;
  int64_t groups;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"plain", {2, 3, 6, 6}, {4, 3, 3, 3}, true, 1, 0, 1, 1},
      {"no bias", {1, 2, 5, 5}, {3, 2, 3, 3}, false, 1, 0, 1, 1},
      {"stride 2, padding 1", {2, 2, 7, 6}, {3, 2, 3, 3}, true, 2, 1, 1, 1},
      {"rectangular", {1, 2, 6, 7}, {2, 2, 2, 3}, true, Size2d(2, 1), Size2d(1, 0), 1, 1},
      {"dilation 2", {1, 2, 7, 7}, {2, 2, 3, 3}, true, 1, 1, 2, 1},
      {"groups 2", {2, 4, 5, 5}, {6, 2, 3, 3}, true, 1, 1, 1, 2},
      {"depthwise", {1, 3, 5, 4}, {3, 1, 3, 2}, false, Size2d(1, 2), 1, 1, 3},
  };
}

// Direct summation over the kernel window, in float64.
Tensor conv2d_reference(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c) {
  const int64_t n = x.size(0), ch = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oc = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3), og = oc / c.groups;
  const int64_t oh = (h + 2 * c.padding.h - c.dilation.h * (kh - 1) - 1) / c.stride.h + 1;
  const int64_t ow = (wd + 2 * c.padding.w - c.dilation.w * (kw - 1) - 1) / c.stride.w + 1;
  (void)ch;
  std::vector<double> xv = values(x), wv = values(w), bv = b.defined() ? values(b) : std::vector<double>(oc, 0.0);
  std::vector<double> out(n * oc * oh * ow, 0.0);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          double acc = bv[o];
          const int64_t group = o / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * c.stride.h - c.padding.h + i * c.dilation.h;
                const int64_t ix = xo * c.stride.w - c.padding.w + j * c.dilation.w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t cin = group * cg + ci;
                acc += xv[((in * x.size(1) + cin) * h + iy) * wd + ix] * wv[((o * cg + ci) * kh + i) * kw + j];
              }
          out[((in * oc + o) * oh + y) * ow + xo] = acc;
        }
  return from_vector<double>(out, {n, oc, oh, ow});
}

TEST(FunctionalConv2d, MatchesDirectSummation) {
  uint64_t seed = 10;
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = uniform64(c.x, seed++), w = uniform64(c.w, seed++);
    Tensor b = c.bias ? uniform64({c.w[0]}, seed++) : Tensor();
    Tensor y = F::conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    expect_same(y, conv2d_reference(x, w, b, c), 1e-12);
  }
}

TEST(FunctionalConv2d, GradcheckEveryOptionCombination) {
  uint64_t seed = 30;
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    TensorList inputs{leaf(c.x, seed++), leaf(c.w, seed++)};
    if (c.bias) inputs.push_back(leaf({c.w[0]}, seed++));
    expect_gradcheck(
        [c](const TensorList& in) {
          return TensorList{
              F::conv2d(in[0], in[1], c.bias ? in[2] : Tensor(), c.stride, c.padding, c.dilation, c.groups)};
        },
        inputs);
  }
}

TEST(FunctionalConv2d, GradcheckWithOnlySomeInputsRequiringGrad) {
  Tensor x = leaf({1, 2, 5, 5}, 50), w = uniform64({3, 2, 3, 3}, 51), b = leaf({3}, 52);
  expect_gradcheck([w](const TensorList& in) { return TensorList{F::conv2d(in[0], w, in[1], 1, 1)}; }, {x, b});
  Tensor x0 = uniform64({1, 2, 5, 5}, 53), w1 = leaf({3, 2, 3, 3}, 54);
  expect_gradcheck([x0](const TensorList& in) { return TensorList{F::conv2d(x0, in[0], Tensor(), 2)}; }, {w1});
}

TEST(FunctionalConv2d, GradcheckOnNonContiguousInputs) {
  auto fn = [](const TensorList& in) { return TensorList{F::conv2d(in[0], in[1], in[2], 1, 1)}; };
  expect_gradcheck(fn, {transposed_leaf({1, 2, 4, 5}, 55), transposed_leaf({3, 2, 3, 3}, 56), leaf({3}, 57)});
}

TEST(FunctionalConv2d, GradgradcheckThroughTheBackwardOp) {
  const ConvCase cases[] = {
      {"plain", {1, 2, 4, 4}, {2, 2, 2, 2}, true, 1, 0, 1, 1},
      {"strided padded grouped", {2, 4, 5, 4}, {4, 2, 3, 2}, true, Size2d(2, 1), 1, 1, 2},
      {"dilated, no bias", {1, 1, 5, 5}, {2, 1, 2, 2}, false, 1, 0, 2, 1},
  };
  uint64_t seed = 60;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    TensorList inputs{leaf(c.x, seed++), leaf(c.w, seed++)};
    if (c.bias) inputs.push_back(leaf({c.w[0]}, seed++));
    expect_gradgradcheck(
        [c](const TensorList& in) {
          return TensorList{
              F::conv2d(in[0], in[1], c.bias ? in[2] : Tensor(), c.stride, c.padding, c.dilation, c.groups)};
        },
        inputs);
  }
}

TEST(FunctionalConv2d, UnbatchedInputKeepsItsRank) {
  Tensor x = leaf({2, 5, 5}, 70), w = leaf({3, 2, 3, 3}, 71);
  Tensor y = F::conv2d(x, w, Tensor(), 1, 1);
  EXPECT_EQ(y.shape(), (Shape{3, 5, 5}));
  expect_same(y, F::conv2d(x.unsqueeze(0), w, Tensor(), 1, 1).squeeze(0));
  expect_gradcheck([](const TensorList& in) { return TensorList{F::conv2d(in[0], in[1], Tensor(), 2, 1)}; }, {x, w});
}

TEST(FunctionalConv2d, RecordsOneNode) {
  Tensor y = F::conv2d(leaf({1, 1, 3, 3}, 72), leaf({1, 1, 2, 2}, 73));
  EXPECT_EQ(y.grad_fn_name(), "Conv2dBackward");
}

TEST(FunctionalConv2d, RejectsBadRanksAndShapes) {
  expect_error(
      [] {
        F::conv2d(zeros({3, 3}), zeros({1, 1, 2, 2}));
      },
      "conv2d: expected x of shape (N, C, H, W) or (C, H, W), got [3, 3]");
  expect_error([] { F::conv2d(zeros({1, 4, 5, 5}), zeros({2, 3, 3, 3})); }, "conv2d");
}

// ---- pooling ----

TEST(FunctionalPool, MaxPoolForwardIsTheKernelsAndIndicesAreReturned) {
  Tensor x = uniform64({2, 3, 6, 6}, 80);
  MaxPool2dOptions options{.kernel = 3, .stride = 2, .padding = 1};
  PoolResult raw = ops::max_pool2d_with_indices(x, options);
  PoolResult r = F::max_pool2d_with_indices(x, options);
  expect_same(r.values, raw.values);
  EXPECT_TRUE(kiln::equal(r.indices, raw.indices));
  expect_same(F::max_pool2d(x, options), raw.values);
}

TEST(FunctionalPool, MaxPoolGradientGoesToTheArgmax) {
  // One 2x2 window per output: the gradient lands on each window's maximum.
  Tensor x = leaf_of({1, 5, 2, 0,  //
                      3, 4, 8, 1,  //
                      0, 0, 1, 1,  //
                      9, 0, 2, 7},
                     {1, 1, 4, 4});
  Tensor y = F::max_pool2d(x, {.kernel = 2});
  expect_values(y, {5, 8, 9, 7});
  kiln::sum(kiln::mul(y, from_vector<double>({1, 2, 3, 4}, {1, 1, 2, 2}))).backward();
  expect_values(x.grad(), {0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 4});
  EXPECT_EQ(y.grad_fn_name(), "MaxPool2dBackward");
}

TEST(FunctionalPool, GradcheckMaxPoolOptions) {
  const MaxPool2dOptions cases[] = {
      {.kernel = 2},
      {.kernel = 3, .stride = 2, .padding = 1},
      {.kernel = 3, .stride = 2, .ceil_mode = true},
      {.kernel = Size2d(2, 3), .stride = Size2d(1, 2), .padding = Size2d(1, 1)},
      {.kernel = 2, .stride = 1, .dilation = 2},
  };
  uint64_t seed = 90;
  for (const MaxPool2dOptions& o : cases) {
    expect_gradcheck([o](const TensorList& in) { return TensorList{F::max_pool2d(in[0], o)}; },
                     {leaf({2, 2, 7, 6}, seed++)});
  }
  expect_gradcheck([](const TensorList& in) { return TensorList{F::max_pool2d(in[0], {.kernel = 2})}; },
                   {transposed_leaf({1, 2, 4, 6}, seed++)});
}

TEST(FunctionalPool, GradgradcheckMaxPool) {
  expect_gradgradcheck(
      [](const TensorList& in) { return TensorList{F::max_pool2d(in[0], {.kernel = 3, .stride = 2, .padding = 1})}; },
      {leaf({1, 2, 5, 5}, 100)});
}

TEST(FunctionalPool, GradcheckAvgPoolOptions) {
  const AvgPool2dOptions cases[] = {
      {.kernel = 2},
      {.kernel = 3, .stride = 2, .padding = 1},
      {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true},
      {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false},
      {.kernel = Size2d(2, 3), .stride = Size2d(2, 1), .divisor_override = 4},
  };
  uint64_t seed = 110;
  for (const AvgPool2dOptions& o : cases) {
    expect_gradcheck([o](const TensorList& in) { return TensorList{F::avg_pool2d(in[0], o)}; },
                     {leaf({2, 2, 6, 7}, seed++)});
    expect_gradgradcheck([o](const TensorList& in) { return TensorList{F::avg_pool2d(in[0], o)}; },
                         {leaf({1, 1, 6, 7}, seed++)});
  }
}

TEST(FunctionalPool, AvgPoolValues) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  // 2x2 windows at stride 1: means of each 2x2 block.
  expect_values(F::avg_pool2d(x, {.kernel = 2, .stride = 1}), {3, 4, 6, 7});
  // Padding 1 counted in the divisor: the corner window holds only x[0][0] = 1.
  expect_values(F::avg_pool2d(x, {.kernel = 2, .stride = 2, .padding = 1}), {0.25, 1.25, 2.75, 7.0});
}

TEST(FunctionalPool, AdaptiveAvgPoolGradcheckAndValues) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {1, 1, 2, 3});
  expect_values(F::adaptive_avg_pool2d(x, 1), {3.5});
  // 3 columns into 2 windows: columns {0, 1} and {1, 2}.
  expect_values(F::adaptive_avg_pool2d(x, Size2d(1, 2)), {3.0, 4.0});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::adaptive_avg_pool2d(in[0], Size2d(3, 2))}; },
                   {leaf({2, 2, 5, 7}, 120)});
  expect_gradgradcheck([](const TensorList& in) { return TensorList{F::adaptive_avg_pool2d(in[0], 2)}; },
                       {leaf({1, 2, 5, 3}, 121)});
}

// ---- dropout ----

TEST(FunctionalDropout, EvalAndZeroProbabilityReturnTheInputItself) {
  Tensor x = leaf({4, 5}, 130);
  EXPECT_TRUE(F::dropout(x, 0.5, /*training=*/false).is_same(x));
  EXPECT_TRUE(F::dropout(x, 0.0, /*training=*/true).is_same(x));
}

TEST(FunctionalDropout, KeepsOrZeroesAndScalesByOneOverKeepProbability) {
  Generator gen(7);
  Tensor x = ops::add(kiln::rand({200, 50}, DType::Float64), 1.0);  // all in [1, 2), never 0
  Tensor y = F::dropout(x, 0.25, true, &gen);
  std::vector<double> xv = values(x), yv = values(y);
  int64_t kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] != 0.0) {
      ++kept;
      EXPECT_NEAR(yv[i], xv[i] / 0.75, 1e-12);
    }
  }
  // 10,000 draws with keep probability 0.75: 7,500 +- 43 (1 sigma).
  EXPECT_NEAR(static_cast<double>(kept), 7500.0, 250.0);
}

TEST(FunctionalDropout, SameGeneratorSeedGivesSameMask) {
  Tensor x = kiln::ones({8, 8}, DType::Float64);
  Generator a(3), b(3);
  expect_same(F::dropout(x, 0.5, true, &a), F::dropout(x, 0.5, true, &b));
}

TEST(FunctionalDropout, GradientIsTheScaledMask) {
  Generator gen(11);
  Tensor x = leaf({6, 7}, 140);
  Tensor y = F::dropout(x, 0.4, true, &gen);
  kiln::sum(y).backward();
  std::vector<double> xv = values(x), yv = values(y), gv = values(x.grad());
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(gv[i], yv[i] / xv[i], 1e-12);
  EXPECT_EQ(y.grad_fn_name(), "DropoutBackward");
}

TEST(FunctionalDropout, GradcheckWithAFixedGenerator) {
  // A generator reset before every call draws the same mask each time, so
  // the function gradcheck differentiates is fixed.
  auto fn = [](const TensorList& in) {
    Generator gen(5);
    return TensorList{F::dropout(in[0], 0.3, true, &gen)};
  };
  expect_gradcheck(fn, {leaf({4, 6}, 150)});
  expect_gradgradcheck(fn, {leaf({3, 3}, 151)});
}

TEST(FunctionalDropout, ProbabilityOneZeroesEverything) {
  Tensor x = leaf({3, 3}, 152);
  Tensor y = F::dropout(x, 1.0, true);
  expect_values(y, std::vector<double>(9, 0.0));
  kiln::sum(y).backward();
  expect_values(x.grad(), std::vector<double>(9, 0.0));
}

TEST(FunctionalDropout, RejectsBadProbabilityAndIntegers) {
  expect_error([] { F::dropout(zeros({2}), 1.5); }, "dropout: the probability p must be in [0, 1], got 1.5");
  expect_error([] { F::dropout(zeros({2}), -0.1); }, "dropout: the probability p must be in [0, 1], got -0.1");
  expect_error([] { F::dropout(kiln::arange(3), 0.5); }, "dropout: expected a floating tensor, got int64");
}

// ---- embedding ----

TEST(FunctionalEmbedding, PicksRowsForAnyIndexShape) {
  Tensor w = from_vector<double>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  Tensor idx = from_vector<int64_t>({3, 0, 2, 3, 1, 1}, {2, 3});
  Tensor y = F::embedding(idx, w);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  expect_values(y, {30, 31, 0, 1, 20, 21, 30, 31, 10, 11, 10, 11});
  Tensor idx32 = from_vector<int32_t>({2}, {});
  Tensor scalar_index = F::embedding(idx32, w);
  EXPECT_EQ(scalar_index.shape(), (Shape{2}));
  expect_values(scalar_index, {20, 21});
}

TEST(FunctionalEmbedding, GradientSumsRepeatedRowsAndSkipsPadding) {
  Tensor w = leaf({5, 3}, 160);
  Tensor idx = from_vector<int64_t>({1, 4, 1, 0, 4, 1}, {6});
  Tensor g = from_vector<double>(std::vector<double>{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6}, {6, 3});
  kiln::sum(kiln::mul(F::embedding(idx, w), g)).backward();
  // row 0: 4; row 1: 1 + 3 + 6 = 10; row 4: 2 + 5 = 7.
  expect_values(w.grad(), {4, 4, 4, 10, 10, 10, 0, 0, 0, 0, 0, 0, 7, 7, 7});

  Tensor w2 = leaf({5, 3}, 161);
  kiln::sum(kiln::mul(F::embedding(idx, w2, /*padding_idx=*/1), g)).backward();
  expect_values(w2.grad(), {4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 7, 7});
  Tensor w3 = leaf({5, 3}, 162);
  kiln::sum(kiln::mul(F::embedding(idx, w3, /*padding_idx=*/-1), g)).backward();  // row 4
  expect_values(w3.grad(), {4, 4, 4, 10, 10, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0});
}

TEST(FunctionalEmbedding, GradcheckWithAndWithoutPadding) {
  Tensor idx = from_vector<int64_t>({2, 0, 2, 3, 3, 3}, {2, 3});
  expect_gradcheck([idx](const TensorList& in) { return TensorList{F::embedding(idx, in[0])}; }, {leaf({4, 3}, 170)});
  // The padding row is held constant (no gradient), which finite differences
  // cannot know, so gradcheck runs with a padding_idx the indices never hit
  // (GradientSumsRepeatedRowsAndSkipsPadding checks the padding row). The
  // second derivative of the padded lookup is consistent either way.
  expect_gradcheck([idx](const TensorList& in) { return TensorList{F::embedding(idx, in[0], 1)}; },
                   {leaf({4, 3}, 171)});
  expect_gradgradcheck(
      [idx](const TensorList& in) {
        return TensorList{kiln::mul(F::embedding(idx, in[0], 0), F::embedding(idx, in[0], 0))};
      },
      {leaf({4, 2}, 172)});
}

TEST(FunctionalEmbedding, RejectsBadIndicesAndWeights) {
  Tensor w = zeros({4, 3});
  expect_error(
      [w] {
        F::embedding(from_vector<int64_t>({0, 4}, {2}), w);
      },
      "embedding: index 4 is out of range for 4 embeddings");
  expect_error([w] { F::embedding(from_vector<int64_t>({-1}, {1}), w); },
               "embedding: index -1 is out of range for 4 embeddings");
  expect_error([w] { F::embedding(zeros({2}), w); }, "embedding: indices must be Int64 or Int32, got float32");
  expect_error([] { F::embedding(from_vector<int64_t>({0}, {1}), zeros({4})); },
               "embedding: weight must be (num_embeddings, embedding_dim), got shape [4]");
  expect_error([w] { F::embedding(from_vector<int64_t>({0}, {1}), w, 4); },
               "embedding: padding_idx must be within [-4, 4), got 4");
}

}  // namespace
}  // namespace kiln::gradtest
