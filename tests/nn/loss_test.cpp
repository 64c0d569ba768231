// The losses of nn::functional: values against float64 loops written from
// torch's definitions (Note [Class-index losses]), gradcheck for every
// reduction and option, and the errors a user can hit.
#include <cmath>

#include "autograd/autograd_test_util.h"
#include "nn/functional.h"

namespace kiln::gradtest {
namespace {

namespace F = kiln::nn::functional;
using F::Reduction;

const Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

const char* reduction_name(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Mean ? "mean" : "sum";
}

// cross_entropy (smoothing > 0 or not) or nll_loss (log_softmax skipped) on
// rows of `logits` (M, C), straight from the definitions.
std::vector<double> class_loss_reference(const std::vector<double>& logits, const std::vector<int64_t>& target,
                                         int64_t classes, const std::vector<double>& weight, int64_t ignore_index,
                                         double smoothing, Reduction reduction, bool apply_log_softmax) {
  const int64_t rows = static_cast<int64_t>(target.size());
  std::vector<double> losses(rows, 0.0);
  double total = 0, weight_sum = 0;
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<double> logp(logits.begin() + n * classes, logits.begin() + (n + 1) * classes);
    if (apply_log_softmax) {
      double lse = 0;
      for (double v : logp) lse += std::exp(v);
      lse = std::log(lse);
      for (double& v : logp) v -= lse;
    }
    if (target[n] == ignore_index) continue;
    const int64_t t = target[n];
    const double wt = weight.empty() ? 1.0 : weight[t];
    double smooth = 0;
    for (int64_t c = 0; c < classes; ++c) smooth += -(weight.empty() ? 1.0 : weight[c]) * logp[c];
    losses[n] = (1 - smoothing) * (-wt * logp[t]) + smoothing / static_cast<double>(classes) * smooth;
    total += losses[n];
    weight_sum += wt;
  }
  if (reduction == Reduction::None) return losses;
  if (reduction == Reduction::Sum) return {total};
  return {total / weight_sum};
}

// ---- cross_entropy ----

TEST(CrossEntropy, HandComputedValue) {
  // Both rows have log-probabilities {-2.4076, -1.4076, -0.4076} (shifted
  // logits) and pick the largest: loss = log(1 + e^-1 + e^-2).
  Tensor logits = from_vector<double>({1, 2, 3, 1, 0, -1}, {2, 3});
  Tensor target = from_vector<int64_t>({2, 0}, {2});
  const double expected = std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  expect_values(F::cross_entropy(logits, target), {expected}, 1e-15);
  expect_values(F::cross_entropy(logits, target, {.reduction = Reduction::Sum}), {2 * expected}, 1e-15);
  expect_values(F::cross_entropy(logits, target, {.reduction = Reduction::None}), {expected, expected}, 1e-15);
}

TEST(CrossEntropy, GradientIsSoftmaxMinusOneHotOverN) {
  Tensor logits = leaf({4, 5}, 1, -2, 2);
  Tensor target = from_vector<int64_t>({0, 4, 2, 2}, {4});
  F::cross_entropy(logits, target).backward();
  std::vector<double> p = values(kiln::softmax(logits.detach(), 1)), expected = p;
  const int64_t t[] = {0, 4, 2, 2};
  for (int n = 0; n < 4; ++n) {
    expected[n * 5 + t[n]] -= 1;
    for (int c = 0; c < 5; ++c) expected[n * 5 + c] /= 4;
  }
  expect_values(logits.grad(), expected, 1e-15);
}

struct ClassCase {
  const char* name;
  bool weighted;
  int64_t ignore_index;
  double smoothing;
};

const ClassCase kClassCases[] = {
    {"plain", false, -100, 0.0},
    {"weighted", true, -100, 0.0},
    {"ignore 2", false, 2, 0.0},
    {"weighted, ignore 2", true, 2, 0.0},
    {"smoothing", false, -100, 0.15},
    {"weighted smoothing ignore", true, 2, 0.3},
    {"ignore -1 smoothing", false, -1, 0.5},
};

// Targets with two entries equal to 2 and one -1 (used as ignore_index in a case).
const std::vector<int64_t> kTargets = {2, 0, 3, 2, 1, -1};

std::vector<int64_t> targets_for(const ClassCase& c) {
  std::vector<int64_t> t = kTargets;
  if (c.ignore_index != -1) t[5] = 3;  // -1 is valid only as ignore_index
  return t;
}

TEST(CrossEntropy, MatchesTheDefinitionForEveryOptionAndReduction) {
  Tensor logits = uniform64({6, 4}, 2, -3, 3);
  Tensor weight = uniform64({4}, 3, 0.2, 2.0);
  for (const ClassCase& c : kClassCases) {
    for (Reduction r : kReductions) {
      SCOPED_TRACE(std::string(c.name) + ", " + reduction_name(r));
      std::vector<int64_t> t = targets_for(c);
      Tensor out = F::cross_entropy(logits, from_vector<int64_t>(t, {6}),
                                    {.weight = c.weighted ? weight : Tensor(),
                                     .ignore_index = c.ignore_index,
                                     .reduction = r,
                                     .label_smoothing = c.smoothing});
      expect_values(out,
                    class_loss_reference(values(logits), t, 4, c.weighted ? values(weight) : std::vector<double>{},
                                         c.ignore_index, c.smoothing, r, true),
                    1e-13);
      if (r == Reduction::None) {
        EXPECT_EQ(out.shape(), (Shape{6}));
      } else {
        EXPECT_EQ(out.dim(), 0);
      }
    }
  }
}

TEST(CrossEntropy, GradcheckEveryOptionAndReduction) {
  Tensor weight = uniform64({4}, 4, 0.2, 2.0);
  uint64_t seed = 5;
  for (const ClassCase& c : kClassCases) {
    for (Reduction r : kReductions) {
      SCOPED_TRACE(std::string(c.name) + ", " + reduction_name(r));
      Tensor target = from_vector<int64_t>(targets_for(c), {6});
      F::CrossEntropyOptions options{.weight = c.weighted ? weight : Tensor(),
                                     .ignore_index = c.ignore_index,
                                     .reduction = r,
                                     .label_smoothing = c.smoothing};
      auto fn = [target, options](const TensorList& in) {
        return TensorList{F::cross_entropy(in[0], target, options)};
      };
      expect_gradcheck(fn, {leaf({6, 4}, seed++, -2, 2)});
      expect_gradgradcheck(fn, {leaf({6, 4}, seed++, -2, 2)});
    }
  }
}

TEST(CrossEntropy, SpatialInputEqualsTheFlattenedRows) {
  // (N, C, d1, d2) is (N*d1*d2, C) with the class dim moved last.
  Tensor logits = leaf({2, 3, 2, 2}, 20);
  Tensor target = from_vector<int64_t>({0, 2, 1, 1, 2, 2, -100, 0}, {2, 2, 2});
  Tensor weight = from_vector<double>({0.5, 1.0, 2.0}, {3});
  Tensor rows = logits.detach().permute({0, 2, 3, 1}).reshape({-1, 3});
  for (Reduction r : kReductions) {
    F::CrossEntropyOptions o{.weight = weight, .reduction = r, .label_smoothing = 0.1};
    Tensor spatial = F::cross_entropy(logits, target, o);
    Tensor flat = F::cross_entropy(rows, target.reshape({-1}), o);
    expect_same(spatial.detach(), r == Reduction::None ? flat.view({2, 2, 2}) : flat, 1e-14);
  }
  expect_gradcheck(
      [target](const TensorList& in) { return TensorList{F::cross_entropy(in[0], target, {.label_smoothing = 0.2})}; },
      {logits});
}

TEST(CrossEntropy, UnbatchedInput) {
  Tensor logits = from_vector<double>({1, 2, 3}, {3});
  Tensor target = from_vector<int64_t>({1}, {});
  expect_values(F::cross_entropy(logits, target), {1 + std::log(1 + std::exp(-1.0) + std::exp(-2.0))}, 1e-15);
  EXPECT_EQ(F::cross_entropy(logits, target, {.reduction = Reduction::None}).dim(), 0);
}

TEST(CrossEntropy, AllIgnoredMeanIsNaNAsTorch) {
  Tensor out = F::cross_entropy(zeros({2, 3}, DType::Float64), from_vector<int64_t>({-100, -100}, {2}));
  EXPECT_TRUE(std::isnan(out.item<double>()));
}

TEST(CrossEntropy, AllIgnoredMeanHasAZeroGradientAsTorch) {
  Tensor logits = leaf({2, 3}, 41);
  F::cross_entropy(logits, from_vector<int64_t>({-100, -100}, {2})).backward();
  expect_values(logits.grad(), std::vector<double>(6, 0.0), 0);
}

TEST(CrossEntropy, TargetsOrWeightsChangedBeforeBackwardAreAnError) {
  // The fused backward reads the targets and weights again (Note [Fused
  // cross entropy]): changing them in place after the forward must not
  // silently change the gradient.
  Tensor logits = leaf({2, 3}, 42);
  Tensor target = from_vector<int64_t>({0, 2}, {2});
  Tensor loss = F::cross_entropy(logits, target);
  target.copy_(from_vector<int64_t>({1, 1}, {2}));
  expect_error([&] { loss.backward(); }, "a tensor saved for backward was modified by an in-place operation");
  Tensor weight = uniform64({3}, 43, 0.5, 1.5);
  Tensor weighted = F::cross_entropy(logits, from_vector<int64_t>({0, 2}, {2}), {.weight = weight});
  ops::fill_(weight, 1.0);
  expect_error([&] { weighted.backward(); }, "a tensor saved for backward was modified by an in-place operation");
}

TEST(CrossEntropy, AGradientOfAnotherDtypeIsConverted) {
  // A float32 loss given a float64 gradient: the backward converts it, as
  // the ops of a composite backward would.
  Tensor logits = leaf({2, 3}, 44).detach().to(DType::Float32).requires_grad_();
  Tensor loss = F::cross_entropy(logits, from_vector<int64_t>({0, 2}, {2}));
  loss.backward(full({}, 2.0, DType::Float64));
  ASSERT_TRUE(logits.grad().defined());
  Tensor once = logits.detach().requires_grad_();
  F::cross_entropy(once, from_vector<int64_t>({0, 2}, {2})).backward();
  expect_values(logits.grad(), values(kiln::mul(once.grad(), 2.0)), 1e-6);
}

TEST(CrossEntropy, ProbabilityTargets) {
  Tensor logits = leaf({3, 4}, 30, -2, 2);
  Tensor probs = kiln::softmax(uniform64({3, 4}, 31, -1, 1), 1);
  Tensor weight = uniform64({4}, 32, 0.5, 1.5);
  std::vector<double> logp = values(kiln::log_softmax(logits.detach(), 1)), y = values(probs), w = values(weight);
  const double s = 0.2;
  double total = 0;
  for (int n = 0; n < 3; ++n)
    for (int c = 0; c < 4; ++c) total += -w[c] * ((1 - s) * y[n * 4 + c] + s / 4) * logp[n * 4 + c];
  expect_values(F::cross_entropy(logits, probs, {.weight = weight, .label_smoothing = s}), {total / 3}, 1e-14);
  expect_values(F::cross_entropy(logits, probs, {.weight = weight, .reduction = Reduction::Sum, .label_smoothing = s}),
                {total}, 1e-14);
  // Differentiable in both the logits and the target probabilities.
  expect_gradcheck(
      [](const TensorList& in) { return TensorList{F::cross_entropy(in[0], in[1], {.label_smoothing = 0.1})}; },
      {leaf({3, 4}, 33), leaf({3, 4}, 34, 0, 1)});
}

TEST(CrossEntropy, RecordsOneFusedNode) {
  Tensor out = F::cross_entropy(leaf({2, 3}, 40), from_vector<int64_t>({0, 1}, {2}));
  EXPECT_EQ(out.grad_fn_name(), "CrossEntropyBackward");
}

TEST(CrossEntropy, Errors) {
  Tensor logits = zeros({2, 3});
  expect_error(
      [&] {
        F::cross_entropy(logits, from_vector<int64_t>({0, 3}, {2}));
      },
      "cross_entropy: target 3 is out of bounds for 3 classes (and is not ignore_index = -100)");
  expect_error(
      [&] {
        F::cross_entropy(logits, from_vector<int64_t>({-1, 0}, {2}));
      },
      "cross_entropy: target -1 is out of bounds for 3 classes");
  expect_error(
      [&] {
        F::cross_entropy(logits, from_vector<int64_t>({0, 1, 2}, {3}));
      },
      "cross_entropy: input of shape [2, 3] needs a target of shape [2], got [3]");
  expect_error(
      [&] {
        F::cross_entropy(logits, from_vector<int32_t>({0, 1}, {2}));
      },
      "cross_entropy: expected target class indices of dtype int64, got int32");
  expect_error(
      [&] {
        F::cross_entropy(logits, from_vector<int64_t>({0, 1}, {2}), {.weight = ones({2})});
      },
      "cross_entropy: weight must have shape (3) for 3 classes, got [2]");
  expect_error(
      [&] {
        F::cross_entropy(logits, from_vector<int64_t>({0, 1}, {2}), {.label_smoothing = 1.5});
      },
      "cross_entropy: label_smoothing must be in [0, 1], got 1.5");
  expect_error(
      [&] {
        F::cross_entropy(logits, zeros({2, 4}));
      },
      "cross_entropy: a floating target holds class probabilities and must have the input's shape [2, 3], got [2, 4]");
  expect_error(
      [&] {
        F::cross_entropy(logits, zeros({2, 3}), {.ignore_index = 0});
      },
      "cross_entropy: ignore_index (0) is not supported with class-probability targets");
  Tensor w = ones({3}).requires_grad_();
  expect_error(
      [&] {
        F::cross_entropy(logits, from_vector<int64_t>({0, 1}, {2}), {.weight = w});
      },
      "cross_entropy: weight requires grad, but the loss has no gradient with respect to its class weights");
}

// ---- nll_loss ----

TEST(NLLLoss, MatchesTheDefinitionAndGradcheck) {
  Tensor logp = kiln::log_softmax(uniform64({6, 4}, 50, -2, 2), 1);
  Tensor weight = uniform64({4}, 51, 0.2, 2.0);
  uint64_t seed = 52;
  for (const ClassCase& c : kClassCases) {
    if (c.smoothing > 0) continue;
    for (Reduction r : kReductions) {
      SCOPED_TRACE(std::string(c.name) + ", " + reduction_name(r));
      std::vector<int64_t> t = targets_for(c);
      Tensor target = from_vector<int64_t>(t, {6});
      F::NLLLossOptions options{
          .weight = c.weighted ? weight : Tensor(), .ignore_index = c.ignore_index, .reduction = r};
      expect_values(F::nll_loss(logp, target, options),
                    class_loss_reference(values(logp), t, 4, c.weighted ? values(weight) : std::vector<double>{},
                                         c.ignore_index, 0.0, r, false),
                    1e-14);
      expect_gradcheck(
          [target, options](const TensorList& in) { return TensorList{F::nll_loss(in[0], target, options)}; },
          {leaf({6, 4}, seed++)});
    }
  }
}

TEST(NLLLoss, HandComputedWeightedMean) {
  // -(w0 * -1 + w2 * -3) / (w0 + w2) with w = {1, 5, 3}: (1 + 9) / 4.
  Tensor logp = from_vector<double>({-1, -2, -9, -8, -7, -3}, {2, 3});
  Tensor target = from_vector<int64_t>({0, 2}, {2});
  expect_values(F::nll_loss(logp, target, {.weight = from_vector<double>({1, 5, 3}, {3})}), {2.5}, 1e-15);
}

TEST(NLLLoss, Errors) {
  expect_error(
      [] {
        F::nll_loss(zeros({2, 3}), from_vector<int64_t>({0, 5}, {2}));
      },
      "nll_loss: target 5 is out of bounds for 3 classes");
  expect_error(
      [] {
        F::nll_loss(from_vector<int64_t>({0, 1}, {1, 2}), from_vector<int64_t>({0}, {1}));
      },
      "nll_loss: expected a floating input, got int64");
}

// ---- mse, l1 ----

TEST(RegressionLosses, HandComputedValues) {
  Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector<double>({1.5, 0, 3, 7}, {2, 2});
  expect_values(F::mse_loss(a, b), {(0.25 + 4 + 0 + 9) / 4}, 1e-15);
  expect_values(F::mse_loss(a, b, Reduction::Sum), {13.25}, 1e-15);
  expect_values(F::mse_loss(a, b, Reduction::None), {0.25, 4, 0, 9}, 1e-15);
  expect_values(F::l1_loss(a, b), {(0.5 + 2 + 0 + 3) / 4.0}, 1e-15);
  expect_values(F::l1_loss(a, b, Reduction::Sum), {5.5}, 1e-15);
  expect_values(F::l1_loss(a, b, Reduction::None), {0.5, 2, 0, 3}, 1e-15);
}

TEST(RegressionLosses, GradcheckInBothArguments) {
  uint64_t seed = 60;
  for (Reduction r : kReductions) {
    SCOPED_TRACE(reduction_name(r));
    expect_gradcheck([r](const TensorList& in) { return TensorList{F::mse_loss(in[0], in[1], r)}; },
                     {leaf({3, 4}, seed++), leaf({3, 4}, seed++)});
    expect_gradcheck([r](const TensorList& in) { return TensorList{F::l1_loss(in[0], in[1], r)}; },
                     {leaf({3, 4}, seed++), leaf({3, 4}, seed++)});
  }
}

TEST(RegressionLosses, RejectMismatchedShapes) {
  expect_error(
      [] {
        F::mse_loss(zeros({4, 1}), zeros({4}));
      },
      "mse_loss: input of shape [4, 1] and target of shape [4] differ");
  expect_error([] { F::l1_loss(zeros({2}), zeros({3})); },
               "l1_loss: input of shape [2] and target of shape [3] differ");
  expect_error(
      [] {
        F::mse_loss(zeros({2}), from_vector<int64_t>({1, 2}, {2}));
      },
      "mse_loss: expected floating input and target, got float32 and int64");
}

// ---- binary_cross_entropy_with_logits ----

double bce_reference(double x, double y, double w, double pos_weight) {
  // -w * (pos_weight * y * log(sigmoid(x)) + (1 - y) * log(1 - sigmoid(x))), in long double.
  long double s = 1.0L / (1.0L + std::exp(-static_cast<long double>(x)));
  return static_cast<double>(-w * (pos_weight * y * std::log(s) + (1 - y) * std::log1p(-s)));
}

TEST(BCEWithLogits, MatchesTheDefinition) {
  Tensor x = uniform64({3, 4}, 70, -4, 4), y = uniform64({3, 4}, 71, 0, 1);
  Tensor w = uniform64({3, 1}, 72, 0.5, 2), pw = uniform64({4}, 73, 0.5, 3);
  std::vector<double> xv = values(x), yv = values(y), wv = values(w), pv = values(pw);
  for (Reduction r : kReductions) {
    std::vector<double> plain, weighted;
    double plain_total = 0, weighted_total = 0;
    for (int i = 0; i < 12; ++i) {
      plain.push_back(bce_reference(xv[i], yv[i], 1, 1));
      weighted.push_back(bce_reference(xv[i], yv[i], wv[i / 4], pv[i % 4]));
      plain_total += plain.back();
      weighted_total += weighted.back();
    }
    auto reduced = [r](const std::vector<double>& all, double total) {
      return r == Reduction::None ? all : std::vector<double>{r == Reduction::Sum ? total : total / 12};
    };
    expect_values(F::binary_cross_entropy_with_logits(x, y, {.reduction = r}), reduced(plain, plain_total), 1e-14);
    expect_values(F::binary_cross_entropy_with_logits(x, y, {.weight = w, .pos_weight = pw, .reduction = r}),
                  reduced(weighted, weighted_total), 1e-14);
  }
}

TEST(BCEWithLogits, StableForLargeLogits) {
  // log(1 + exp(800)) overflows if computed directly.
  Tensor x = from_vector<double>({800, -800, 40, -40, 0}, {5}).requires_grad_();
  Tensor y = from_vector<double>({0, 1, 1, 0, 1}, {5});
  Tensor out = F::binary_cross_entropy_with_logits(x, y, {.reduction = Reduction::None});
  expect_values(out, {800, 800, std::exp(-40.0), std::exp(-40.0), std::log(2.0)}, 1e-12);
  kiln::sum(out).backward();
  // d/dx = sigmoid(x) - y.
  expect_values(x.grad(), {1, -1, -std::exp(-40.0), std::exp(-40.0), -0.5}, 1e-15);
}

TEST(BCEWithLogits, GradcheckInLogitsTargetsAndWithWeights) {
  uint64_t seed = 80;
  Tensor w = uniform64({4}, 81, 0.5, 2), pw = uniform64({4}, 82, 0.5, 3);
  for (Reduction r : kReductions) {
    SCOPED_TRACE(reduction_name(r));
    expect_gradcheck(
        [r](const TensorList& in) {
          return TensorList{F::binary_cross_entropy_with_logits(in[0], in[1], {.reduction = r})};
        },
        {leaf({3, 4}, seed++, -3, 3), leaf({3, 4}, seed++, 0, 1)});
    expect_gradcheck(
        [r, w, pw](const TensorList& in) {
          return TensorList{
              F::binary_cross_entropy_with_logits(in[0], in[1], {.weight = w, .pos_weight = pw, .reduction = r})};
        },
        {leaf({3, 4}, seed++, -3, 3), leaf({3, 4}, seed++, 0, 1)});
  }
}

TEST(BCEWithLogits, Errors) {
  expect_error(
      [] {
        F::binary_cross_entropy_with_logits(zeros({3}), zeros({3, 1}));
      },
      "binary_cross_entropy_with_logits: input of shape [3] and target of shape [3, 1] differ");
  expect_error(
      [] {
        F::binary_cross_entropy_with_logits(zeros({3}), zeros({3}), {.weight = zeros({2, 3})});
      },
      "binary_cross_entropy_with_logits: weight [2, 3] and pos_weight [] must broadcast to the input's shape [3]");
}

}  // namespace
}  // namespace kiln::gradtest
