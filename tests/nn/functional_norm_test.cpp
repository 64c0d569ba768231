// nn::functional::batch_norm and layer_norm: values against float64 loops,
// running-statistics updates, gradcheck in every mode, and second
// derivatives through the differentiable backward formulas.
#include <cmath>

#include "autograd/autograd_test_util.h"
#include "nn/functional.h"

namespace kiln::gradtest {
namespace {

namespace F = kiln::nn::functional;

// Per-channel statistics of x (N, C, *) in float64: the mean and the biased
// and unbiased variances.
struct ChannelStats {
  std::vector<double> mean, var, unbiased_var;
};

ChannelStats channel_stats(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), inner = x.numel() / (n * c);
  std::vector<double> xv = values(x);
  ChannelStats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  const double m = static_cast<double>(n * inner);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < inner; ++k) sum += xv[(i * c + ch) * inner + k];
    const double mean = sum / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < inner; ++k) sq += std::pow(xv[(i * c + ch) * inner + k] - mean, 2);
    s.mean[ch] = mean;
    s.var[ch] = sq / m;
    s.unbiased_var[ch] = sq / (m - 1);
  }
  return s;
}

// (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c] in float64.
std::vector<double> normalize_channels(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                                       const std::vector<double>& w, const std::vector<double>& b, double eps) {
  const int64_t n = x.size(0), c = x.size(1), inner = x.numel() / (n * c);
  std::vector<double> xv = values(x), out(xv.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t at = (i * c + ch) * inner + k;
        out[at] = (xv[at] - mean[ch]) / std::sqrt(var[ch] + eps) * w[ch] + b[ch];
      }
  return out;
}

TEST(FunctionalBatchNorm, TrainingNormalisesWithBatchStatsAndUpdatesRunningStats) {
  Tensor x = uniform64({4, 3, 2, 5}, 1, -2, 3);
  Tensor w = uniform64({3}, 2), b = uniform64({3}, 3);
  Tensor rm = uniform64({3}, 4), rv = uniform64({3}, 5, 0.5, 2.0);
  std::vector<double> rm0 = values(rm), rv0 = values(rv);
  Tensor y = F::batch_norm(x, rm, rv, w, b, /*training=*/true, /*momentum=*/0.3, /*eps=*/1e-3);
  ChannelStats s = channel_stats(x);
  expect_values(y, normalize_channels(x, s.mean, s.var, values(w), values(b), 1e-3), 1e-12);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(values(rm)[c], 0.7 * rm0[c] + 0.3 * s.mean[c], 1e-12);
    EXPECT_NEAR(values(rv)[c], 0.7 * rv0[c] + 0.3 * s.unbiased_var[c], 1e-12);
  }
}

TEST(FunctionalBatchNorm, EvalNormalisesWithRunningStatsAndLeavesThem) {
  Tensor x = uniform64({3, 2, 4}, 6, -2, 3);
  Tensor rm = uniform64({2}, 7), rv = uniform64({2}, 8, 0.5, 2.0);
  std::vector<double> rm0 = values(rm), rv0 = values(rv);
  Tensor y = F::batch_norm(x, rm, rv);
  expect_values(y, normalize_channels(x, rm0, rv0, {1, 1}, {0, 0}, 1e-5), 1e-12);
  expect_values(rm, rm0, 0.0);
  expect_values(rv, rv0, 0.0);
}

TEST(FunctionalBatchNorm, TrainingWithoutRunningStatsOrAffine) {
  Tensor x = uniform64({5, 2}, 9);
  ChannelStats s = channel_stats(x);
  expect_values(F::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true),
                normalize_channels(x, s.mean, s.var, {1, 1}, {0, 0}, 1e-5), 1e-12);
}

TEST(FunctionalBatchNorm, GradcheckTrainingAndEvalWithAndWithoutAffine) {
  Tensor rm = uniform64({3}, 10), rv = uniform64({3}, 11, 0.5, 2.0);
  for (bool training : {true, false}) {
    for (bool affine : {true, false}) {
      SCOPED_TRACE(std::string(training ? "training" : "eval") + (affine ? ", affine" : ""));
      TensorList inputs{leaf({4, 3, 3}, 12)};
      if (affine) {
        inputs.push_back(leaf({3}, 13));
        inputs.push_back(leaf({3}, 14));
      }
      auto fn = [=](const TensorList& in) {
        // Fresh copies: training updates the running stats in place.
        return TensorList{F::batch_norm(in[0], rm.clone(), rv.clone(), affine ? in[1] : Tensor(),
                                        affine ? in[2] : Tensor(), training, 0.1, 1e-5)};
      };
      expect_gradcheck(fn, inputs);
      expect_gradgradcheck(fn, inputs);
    }
  }
}

TEST(FunctionalBatchNorm, GradcheckFourDimensionalAndNonContiguous) {
  auto fn = [](const TensorList& in) {
    return TensorList{F::batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true)};
  };
  expect_gradcheck(fn, {leaf({2, 3, 3, 2}, 15), leaf({3}, 16), leaf({3}, 17)});
  expect_gradcheck(fn, {transposed_leaf({3, 2, 4}, 18), leaf({2}, 19), leaf({2}, 20)});
}

TEST(FunctionalBatchNorm, CreateGraphGradientsEqualTheKernels) {
  // With create_graph the backward runs the differentiable formulas instead
  // of the kernel: the first derivatives must agree.
  Tensor x = leaf({4, 3, 5}, 21), w = leaf({3}, 22), b = leaf({3}, 23);
  Tensor rm = uniform64({3}, 24), rv = uniform64({3}, 25, 0.5, 2.0);
  Tensor g = uniform64({4, 3, 5}, 26);
  for (bool training : {true, false}) {
    Tensor y1 = F::batch_norm(x, rm, rv, w, b, training);
    TensorList kernel = autograd::grad({y1}, {x, w, b}, {g});
    Tensor y2 = F::batch_norm(x, rm, rv, w, b, training);
    TensorList formulas = autograd::grad({y2}, {x, w, b}, {g}, /*retain_graph=*/true, /*create_graph=*/true);
    for (int i = 0; i < 3; ++i) expect_same(formulas[i].detach(), kernel[i], 1e-12);
  }
}

TEST(FunctionalBatchNorm, RejectsOneValuePerChannelInTraining) {
  expect_error(
      [] {
        F::batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      "batch_norm: expected more than 1 value per channel when training, got x of shape [1, 3]");
  expect_error([] { F::batch_norm(zeros({3}), zeros({3}), ones({3})); },
               "batch_norm: expected x of shape (N, C, *), got [3]");
}

// ---- layer_norm ----

TEST(FunctionalLayerNorm, ValuesOverTheTrailingDims) {
  Tensor x = uniform64({2, 3, 4}, 30, -2, 2);
  Tensor w = uniform64({3, 4}, 31), b = uniform64({3, 4}, 32);
  Tensor y = F::layer_norm(x, {3, 4}, w, b, 1e-4);
  std::vector<double> xv = values(x), wv = values(w), bv = values(b), expected(24);
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int k = 0; k < 12; ++k) mean += xv[r * 12 + k] / 12;
    for (int k = 0; k < 12; ++k) var += std::pow(xv[r * 12 + k] - mean, 2) / 12;
    for (int k = 0; k < 12; ++k) expected[r * 12 + k] = (xv[r * 12 + k] - mean) / std::sqrt(var + 1e-4) * wv[k] + bv[k];
  }
  expect_values(y, expected, 1e-12);
}

TEST(FunctionalLayerNorm, GradcheckAndGradgradcheck) {
  struct Case {
    Shape x, normalized;
    bool weight, bias;
  };
  const Case cases[] = {{{3, 5}, {5}, true, true},
                        {{2, 3, 4}, {3, 4}, true, true},
                        {{2, 4}, {4}, false, false},
                        {{3, 4}, {4}, true, false},
                        {{4}, {4}, true, true}};
  uint64_t seed = 40;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.x));
    TensorList inputs{leaf(c.x, seed++)};
    if (c.weight) inputs.push_back(leaf(c.normalized, seed++));
    if (c.bias) inputs.push_back(leaf(c.normalized, seed++));
    auto fn = [c](const TensorList& in) {
      return TensorList{F::layer_norm(in[0], c.normalized, c.weight ? in[1] : Tensor(),
                                      c.bias ? in[c.weight ? 2 : 1] : Tensor(), 1e-5)};
    };
    expect_gradcheck(fn, inputs);
    expect_gradgradcheck(fn, inputs);
  }
  expect_gradcheck([](const TensorList& in) { return TensorList{F::layer_norm(in[0], {3}, in[1], in[2])}; },
                   {transposed_leaf({4, 3}, seed++), leaf({3}, seed++), leaf({3}, seed++)});
}

TEST(FunctionalLayerNorm, CreateGraphGradientsEqualTheKernels) {
  Tensor x = leaf({3, 2, 5}, 60), w = leaf({5}, 61), b = leaf({5}, 62);
  Tensor g = uniform64({3, 2, 5}, 63);
  TensorList kernel = autograd::grad({F::layer_norm(x, {5}, w, b)}, {x, w, b}, {g});
  TensorList formulas = autograd::grad({F::layer_norm(x, {5}, w, b)}, {x, w, b}, {g}, true, true);
  for (int i = 0; i < 3; ++i) expect_same(formulas[i].detach(), kernel[i], 1e-12);
}

TEST(FunctionalLayerNorm, RejectsAMismatchedShape) {
  expect_error([] { F::layer_norm(zeros({2, 3}), {4}); }, "layer_norm");
}

}  // namespace
}  // namespace kiln::gradtest
