// Adam and AdamW against a float64 transcription of PyTorch's updates.
#include "optim/adam.h"

#include "optim_test_util.h"

namespace kiln {

using namespace kiln::optim;
namespace {

// PyTorch's Adam/AdamW update for one parameter, in float64.
struct AdamReference {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled;
  int step_count = 0;
  std::vector<double> m = {}, v = {}, v_max = {};

  void step(std::vector<double>& p, std::vector<double> g) {
    if (m.empty()) m = v = v_max = std::vector<double>(p.size(), 0.0);
    ++step_count;
    const double bc1 = 1.0 - std::pow(beta1, step_count);
    const double bc2 = 1.0 - std::pow(beta2, step_count);
    for (size_t i = 0; i < p.size(); ++i) {
      if (maximize) g[i] = -g[i];
      if (decoupled) {
        p[i] *= 1.0 - lr * weight_decay;
      } else {
        g[i] += weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1.0 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
      v_max[i] = std::max(v_max[i], v[i]);
      const double denom = std::sqrt(amsgrad ? v_max[i] : v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

template <class Options>
AdamReference reference_for(const Options& o, bool decoupled) {
  return {o.lr(), o.beta1(), o.beta2(), o.eps(), o.weight_decay(), o.amsgrad(), o.maximize(), decoupled};
}

// Runs the optimizer on two parameters and checks every step against the
// float64 reference. Gradients shrink over the steps so that the second
// moment does not simply track the first.
template <class Optim, class Options>
void check_adam(const Options& options, DType dtype, double rtol, int steps = 6) {
  const bool decoupled = std::is_same_v<Optim, AdamW>;
  std::vector<std::vector<double>> values = {pseudo_random(6, -1, 1, 21), pseudo_random(4, -1, 1, 22)};
  if (dtype == DType::Float32) values = {as_float32(values[0]), as_float32(values[1])};
  std::vector<Tensor> params = {make_param(values[0], {3, 2}, dtype), make_param(values[1], {4}, dtype)};
  Optim opt(params, options);
  std::vector<AdamReference> refs(2, reference_for(options, decoupled));
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<double> g = pseudo_random(params[i].numel(), -1, 1, 50 * s + i);
      for (double& x : g) x /= (1.0 + s);
      if (dtype == DType::Float32) g = as_float32(g);
      set_grad_values(params[i], g);
      refs[i].step(values[i], g);
    }
    opt.step();
    for (size_t i = 0; i < params.size(); ++i)
      expect_near_all(values_of(params[i]), values[i], rtol, rtol * 1e-2,
                      "step " + std::to_string(s) + " param " + std::to_string(i));
  }
  EXPECT_EQ(opt.state(params[0]).at("step").template item<double>(), steps);
  EXPECT_EQ(opt.state(params[0]).contains("max_exp_avg_sq"), options.amsgrad());
}

TEST(Adam, FirstStepMovesEachElementByAboutLr) {
  // With m = (1 - b1) g and v = (1 - b2) g^2, the bias corrections make the
  // first update lr * g / (|g| + eps'), i.e. lr in the direction of -g.
  Tensor p = make_param({1.0, -1.0, 0.5}, {3}, DType::Float64);
  Adam opt({p}, AdamOptions(0.1));
  set_grad_values(p, {3.0, -0.01, 200.0});
  opt.step();
  expect_near_all(values_of(p), {0.9, -0.9, 0.4}, 1e-6, 0, "param");
}

TEST(Adam, MatchesReferenceFloat64AndFloat32) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    double rtol = dtype == DType::Float64 ? 1e-12 : 1e-5;
    SCOPED_TRACE(detail::str(dtype));
    check_adam<Adam>(AdamOptions(0.01), dtype, rtol);
    check_adam<Adam>(AdamOptions(0.01).beta1(0.8).beta2(0.95).eps(1e-6).weight_decay(0.1), dtype, rtol);
    check_adam<Adam>(AdamOptions(0.02).weight_decay(0.05).amsgrad(true), dtype, rtol);
    check_adam<Adam>(AdamOptions(0.02).maximize(true), dtype, rtol);
  }
}

TEST(AdamW, MatchesReferenceFloat64AndFloat32) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    double rtol = dtype == DType::Float64 ? 1e-12 : 1e-5;
    SCOPED_TRACE(detail::str(dtype));
    check_adam<AdamW>(AdamWOptions(0.01), dtype, rtol);
    check_adam<AdamW>(AdamWOptions(0.01).beta1(0.85).beta2(0.9).weight_decay(0.3), dtype, rtol);
    check_adam<AdamW>(AdamWOptions(0.03).weight_decay(0.1).amsgrad(true).maximize(true), dtype, rtol);
  }
}

TEST(AdamW, DecaysTheParameterNotTheGradient) {
  // A zero gradient leaves the moments at 0: Adam's L2 term would move the
  // parameter through them; AdamW only scales it by 1 - lr * wd.
  Tensor p = make_param({2.0}, {1}, DType::Float64);
  AdamW opt({p}, AdamWOptions(0.1).weight_decay(0.5));
  EXPECT_EQ(opt.defaults().weight_decay(), 0.5);
  set_grad_values(p, {0.0});
  opt.step();
  EXPECT_EQ(values_of(p), (std::vector<double>{2.0 * (1.0 - 0.05)}));
  EXPECT_EQ(AdamWOptions().weight_decay(), 1e-2);  // PyTorch's default
  EXPECT_EQ(AdamOptions().weight_decay(), 0.0);
}

TEST(AdamW, IsAdamWithDecoupledWeightDecay) {
  // One update: Adam with the flag takes AdamW's steps bitwise, fused or not.
  for (bool fused : {true, false}) {
    Tensor a = make_param({1.0, -2.0, 0.5}, {3}), b = make_param({1.0, -2.0, 0.5}, {3});
    Adam adam({a}, AdamOptions(0.1).weight_decay(0.3).decoupled_weight_decay(true).fused(fused));
    AdamW adamw({b}, AdamWOptions(0.1).weight_decay(0.3).fused(fused));
    EXPECT_TRUE(adamw.defaults().decoupled_weight_decay());
    for (int s = 0; s < 3; ++s) {
      set_grad_values(a, {0.3, -0.1 * s, 1.0});
      set_grad_values(b, {0.3, -0.1 * s, 1.0});
      adam.step();
      adamw.step();
    }
    EXPECT_EQ(values_of(a), values_of(b)) << "fused " << fused;
  }
  // Still named AdamW, from the constructor's groups on.
  Tensor p = make_param({1.0}, {1});
  AdamW opt({p}, AdamWOptions());
  EXPECT_EQ(opt.name(), "AdamW");
  expect_error(
      [&] {
        AdamW({ParamGroup{{p}, {{"betas", 0.9}}}}, AdamWOptions());
      },
      "AdamW::add_param_group: unknown hyperparameter 'betas' (AdamW has:");
}

TEST(Adam, AmsgradKeepsTheLargestSecondMoment) {
  Tensor p = make_param({0.0}, {1}, DType::Float64);
  Adam opt({p}, AdamOptions(0.1).beta2(0.5).amsgrad(true));
  set_grad_values(p, {2.0});
  opt.step();
  set_grad_values(p, {0.0});
  opt.step();
  // v: 0.5 * 4 = 2, then 1; the max stays 2.
  EXPECT_EQ(values_of(opt.state(p).at("exp_avg_sq")), (std::vector<double>{1.0}));
  EXPECT_EQ(values_of(opt.state(p).at("max_exp_avg_sq")), (std::vector<double>{2.0}));
}

TEST(Adam, RejectsInvalidHyperparameters) {
  Tensor p = make_param({1.0}, {1});
  expect_error([&] { Adam({p}, AdamOptions(-1)); }, "Adam: invalid learning rate -1 (must be >= 0)");
  expect_error([&] { Adam({p}, AdamOptions().beta1(1.0)); }, "Adam: invalid beta1 1 (must be in [0, 1))");
  expect_error([&] { Adam({p}, AdamOptions().beta2(-0.1)); }, "Adam: invalid beta2 -0.1 (must be in [0, 1))");
  expect_error([&] { Adam({p}, AdamOptions().eps(-1e-8)); }, "Adam: invalid eps -1e-08 (must be >= 0)");
  expect_error([&] { AdamW({p}, AdamWOptions().weight_decay(-0.1)); },
               "AdamW: invalid weight_decay -0.1 (must be >= 0)");
  Adam opt({p}, AdamOptions());
  expect_error(
      [&] {
        opt.add_param_group({{make_param({1.0}, {1})}, {{"betas", 0.9}}});
      },
      "Adam::add_param_group: unknown hyperparameter 'betas' (Adam has: lr, beta1, beta2, eps, "
      "weight_decay, amsgrad, maximize)");
  EXPECT_EQ(opt.num_param_groups(), 1u);
}

TEST(Adam, AmsgradTurnedOnAfterTheFirstStepIsAnError) {
  Tensor p = make_param({1.0}, {1});
  Adam opt({p}, AdamOptions());
  set_grad_values(p, {1.0});
  opt.step();
  opt.set_hyperparameter(0, "amsgrad", 1);
  expect_error([&] { opt.step(); },
               "Adam::step: parameter 0 (group 0) has no max_exp_avg_sq state: amsgrad was turned on after its "
               "first step");
}

}  // namespace
}  // namespace kiln
