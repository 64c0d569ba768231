// GradScaler (optim/grad_scaler.h): scaling, unscaling, skipped steps, the
// scale's backoff and growth against hand-computed sequences (torch's
// _amp_update_scale_ rule), the error paths and the state dict.
#include "optim/grad_scaler.h"

#include <unistd.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "nn/linear.h"
#include "optim/training_checkpoint.h"
#include "tensor/fused_optim.h"
#include "optim_test_util.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One parameter [1, 2, 3] and plain SGD with lr 1: a step subtracts the grad.
struct OneParameter {
  Tensor p = make_param({1, 2, 3}, {3});
  SGD sgd{{p}, SGDOptions(1.0)};
};

// Sets p's grad to `values` times the scaler's scale, as backward on
// scale(loss) would leave it.
void set_scaled_grad(const Tensor& p, const GradScaler& scaler, std::vector<double> values) {
  for (double& v : values) v *= scaler.get_scale();
  set_grad_values(p, values);
}

TEST(GradScaler, ScaleMultipliesTheLossInFloat32) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  Tensor loss = scalar_tensor(3.0, DType::Float32);
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.dtype(), DType::Float32);
  EXPECT_EQ(scaled.item<double>(), 3.0 * 65536.0);
  // A float16 loss is widened first: 3 * 65536 overflows float16.
  Tensor half_scaled = scaler.scale(loss.to(DType::Float16));
  EXPECT_EQ(half_scaled.dtype(), DType::Float32);
  EXPECT_EQ(half_scaled.item<double>(), 3.0 * 65536.0);
  // Differentiable: the gradient of the scaled loss is the scale.
  Tensor w = make_param({2}, {1});
  Tensor l = kiln::sum(kiln::mul(w, w));
  scaler.scale(l).backward();
  EXPECT_EQ(values_of(w.grad()), std::vector<double>({4.0 * 65536.0}));
  expect_error([&] { scaler.scale(Tensor()); }, "GradScaler::scale: expected a floating loss, got an undefined tensor");
  expect_error([&] { scaler.scale(scalar_tensor(1, DType::Int64)); },
               "GradScaler::scale: expected a floating loss, got int64");
}

TEST(GradScaler, StepWithFiniteGradsUnscalesAndSteps) {
  OneParameter s;
  GradScaler scaler;
  set_scaled_grad(s.p, scaler, {0.5, -0.25, 0.125});
  EXPECT_TRUE(scaler.step(s.sgd));
  EXPECT_EQ(values_of(s.p), std::vector<double>({0.5, 2.25, 2.875}));
  EXPECT_EQ(values_of(s.p.grad()), std::vector<double>({0.5, -0.25, 0.125}));  // unscaled in place
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, InfOrNanGradSkipsTheStepAndBacksOff) {
  for (double bad : {kInf, -kInf, std::nan("")}) {
    OneParameter s;
    GradScaler scaler;
    set_grad_values(s.p, {1.0, bad, 2.0});
    EXPECT_FALSE(scaler.step(s.sgd));
    EXPECT_EQ(values_of(s.p), std::vector<double>({1, 2, 3}));  // untouched
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, ScaleFollowsTorchsUpdateRule) {
  // init 8, interval 2: clean, clean (grow), inf (back off), clean, inf,
  // clean, clean (grow), clean: by hand from _amp_update_scale_.
  OneParameter s;
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 2});
  const std::vector<bool> overflow = {false, false, true, false, true, false, false, false};
  const std::vector<double> scales = {8, 16, 8, 8, 4, 4, 8, 8};
  const std::vector<int64_t> trackers = {1, 0, 0, 1, 0, 1, 0, 1};
  for (size_t i = 0; i < overflow.size(); ++i) {
    set_scaled_grad(s.p, scaler, {overflow[i] ? kInf : 1.0, 0.0, 0.0});
    EXPECT_EQ(scaler.step(s.sgd), !overflow[i]) << "step " << i;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), scales[i]) << "step " << i;
    EXPECT_EQ(scaler.growth_tracker(), trackers[i]) << "step " << i;
  }
  // Six clean steps subtracted 1 from p[0] each.
  EXPECT_EQ(values_of(s.p), std::vector<double>({-5, 2, 3}));
}

TEST(GradScaler, CustomFactorsAndAScaleThatWouldOverflowFloat32) {
  OneParameter s;
  GradScaler scaler({.init_scale = 3e38, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 1});
  const double start = static_cast<double>(static_cast<float>(3e38));
  EXPECT_EQ(scaler.get_scale(), start);
  set_grad_values(s.p, {1, 1, 1});
  scaler.step(s.sgd);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), start);  // 1.2e39 is not a float32: kept
  EXPECT_EQ(scaler.growth_tracker(), 0);
  set_grad_values(s.p, {kInf, 1, 1});
  scaler.step(s.sgd);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(static_cast<float>(start * 0.25)));
  scaler.update(1024.0);  // an explicit scale, as torch's update(new_scale)
  EXPECT_EQ(scaler.get_scale(), 1024.0);
}

TEST(GradScaler, FusedUnscaleEqualsMulAndFlagsEveryNonFiniteProduct) {
  // float32 and float64 gradients, one big enough to be split over threads.
  const double inv_scale = 1.0 / 1024;
  std::vector<Tensor> grads, expected;
  for (auto [n, dtype] : {std::pair<int64_t, DType>{5, DType::Float32}, {3, DType::Float64},
                          {300000, DType::Float32}}) {
    Tensor g = from_vector(pseudo_random(n, -1e3, 1e3, 7 + n), {n}).to(dtype);
    expected.push_back(ops::mul(g, inv_scale));
    grads.push_back(g);
  }
  Tensor found = zeros({});
  ops::unscale_grads_(grads, inv_scale, found);
  EXPECT_EQ(found.item<float>(), 0.0f);
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(same_values(grads[i], expected[i])) << "gradient " << i;

  // inf, -inf and NaN anywhere, and a finite float32 that the unscale (by
  // 2, a scale below 1) carries past float32's range.
  const std::vector<std::pair<double, double>> bad = {{kInf, 0.5}, {-kInf, 0.5}, {std::nan(""), 0.5}, {3e38, 2.0}};
  for (auto [value, scale] : bad) {
    for (int64_t at : {int64_t{0}, int64_t{299999}}) {
      Tensor big = zeros({300000});
      big.data<float>()[at] = static_cast<float>(value);
      Tensor flag = zeros({});
      ops::unscale_grads_({zeros({2}, DType::Float64), big}, scale, flag);
      EXPECT_EQ(flag.item<float>(), 1.0f) << value << " at " << at;
    }
  }
  // A raised flag stays raised.
  Tensor raised = ones({});
  ops::unscale_grads_({ones({4})}, 0.5, raised);
  EXPECT_EQ(raised.item<float>(), 1.0f);
  // Finite elements whose sum leaves float32's range are no overflow.
  Tensor found_again = zeros({});
  ops::unscale_grads_({full({4}, 3e38)}, 1.0, found_again);
  EXPECT_EQ(found_again.item<float>(), 0.0f);
}

TEST(GradScaler, FusedUnscaleErrors) {
  Tensor found = zeros({});
  EXPECT_FALSE(ops::unscale_grads_fusable({zeros({2}, DType::BFloat16)}));
  EXPECT_TRUE(ops::unscale_grads_fusable({zeros({2}), zeros({3}, DType::Float64)}));
  expect_error([&] { ops::unscale_grads_({zeros({2}), zeros({2}, DType::BFloat16)}, 1.0, found); },
               "unscale_grads_: cannot fuse gradient 1: it is bfloat16 (float32 or float64 only)");
  expect_error([&] { ops::unscale_grads_({zeros({2, 3}).t()}, 1.0, found); },
               "unscale_grads_: cannot fuse gradient 0: it is not contiguous");
  expect_error([&] { ops::unscale_grads_({zeros({2})}, 1.0, zeros({}, DType::Float64)); },
               "unscale_grads_: found_inf must be one float32 element on cpu, got float64 [] on cpu");
}

TEST(GradScaler, UnfusedGradientsAreCheckedElementByElementToo) {
  // bfloat16 gradients take the per-tensor ops: inf and NaN are found, a
  // large finite sum is not an overflow.
  for (double bad : {kInf, std::nan("")}) {
    Tensor p = make_param({1, 2, 3}, {3}, DType::BFloat16);
    SGD sgd({p}, SGDOptions(1.0));
    GradScaler scaler({.init_scale = 1.0});
    set_grad_values(p, {1.0, bad, 2.0});
    EXPECT_FALSE(scaler.step(sgd));
  }
  Tensor p = make_param({1, 2, 3}, {3}, DType::BFloat16);
  SGD sgd({p}, SGDOptions(1.0));
  GradScaler scaler({.init_scale = 1.0});
  set_grad_values(p, {3e38, 3e38, 3e38});
  EXPECT_TRUE(scaler.step(sgd));
}

TEST(GradScaler, UnscaleBeforeStepIsNotRepeated) {
  OneParameter s;
  GradScaler scaler({.init_scale = 4.0});
  set_scaled_grad(s.p, scaler, {1, 2, 3});
  scaler.unscale_(s.sgd);
  EXPECT_EQ(values_of(s.p.grad()), std::vector<double>({1, 2, 3}));
  EXPECT_TRUE(scaler.step(s.sgd));
  EXPECT_EQ(values_of(s.p), std::vector<double>({0, 0, 0}));
}

TEST(GradScaler, AnyOptimizerWithAnInfBacksOffTheSharedScale) {
  OneParameter a, b;
  GradScaler scaler;
  set_grad_values(a.p, {1, 1, 1});
  set_grad_values(b.p, {1, kInf, 1});
  EXPECT_TRUE(scaler.step(a.sgd));
  EXPECT_FALSE(scaler.step(b.sgd));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScaler, CallOrderErrors) {
  OneParameter s;
  GradScaler scaler;
  expect_error([&] { scaler.update(); },
               "GradScaler::update: no inf checks were recorded since the last update(); call step(optimizer) first");
  expect_error([&] { scaler.step(s.sgd); },
               "GradScaler::step: no inf checks were recorded for this optimizer: none of its parameters has a "
               "gradient");
  scaler.update(65536.0);  // clears the records
  set_grad_values(s.p, {1, 1, 1});
  scaler.unscale_(s.sgd);
  expect_error([&] { scaler.unscale_(s.sgd); },
               "GradScaler::unscale_: already called on this optimizer since the last update()");
  scaler.step(s.sgd);
  expect_error([&] { scaler.step(s.sgd); },
               "GradScaler::step: already called on this optimizer since the last update()");
  expect_error([&] { scaler.unscale_(s.sgd); }, "GradScaler::unscale_: called after step()");
  scaler.update();
  set_grad_values(s.p, {1, 1, 1});
  EXPECT_TRUE(scaler.step(s.sgd));  // a fresh iteration after update()
}

TEST(GradScaler, RefusesFloat16GradientsAndBadOptions) {
  Tensor p = make_param({1, 2}, {2}, DType::Float16);
  SGD sgd({p}, SGDOptions(1.0).fused(false));
  set_grad_values(p, {1, 1});
  GradScaler scaler;
  expect_error([&] { scaler.unscale_(sgd); }, "GradScaler::unscale_: parameter 0 of group 0 has a float16 gradient");
  // A float16 gradient after float32 ones: refused before any is unscaled.
  Tensor first = make_param({1, 2}, {2});
  SGD mixed({first, p}, SGDOptions(1.0).fused(false));
  set_grad_values(first, {4, 8});
  expect_error([&] { scaler.unscale_(mixed); }, "GradScaler::unscale_: parameter 1 of group 0 has a float16 gradient");
  EXPECT_EQ(values_of(first.grad()), (std::vector<double>{4, 8}));
  expect_error([] { GradScaler g({.init_scale = 0}); }, "GradScaler: init_scale must be positive and finite, got 0");
  expect_error([] { GradScaler g({.growth_factor = 1}); }, "GradScaler: growth_factor must be > 1, got 1");
  expect_error([] { GradScaler g({.backoff_factor = 1}); }, "GradScaler: backoff_factor must be in (0, 1), got 1");
  expect_error([] { GradScaler g({.growth_interval = 0}); }, "GradScaler: growth_interval must be at least 1, got 0");
  expect_error([&] { scaler.update(-1.0); }, "GradScaler::update: new_scale must be positive and finite, got -1");
}

TEST(GradScaler, DisabledIsAPassThrough) {
  OneParameter s;
  GradScaler scaler({.enabled = false});
  Tensor loss = scalar_tensor(3.0, DType::Float32);
  EXPECT_EQ(scaler.scale(loss).impl_ptr(), loss.impl_ptr());
  EXPECT_EQ(scaler.get_scale(), 1.0);
  set_grad_values(s.p, {kInf, 1, 1});
  EXPECT_TRUE(scaler.step(s.sgd));  // no check: just steps
  EXPECT_EQ(values_of(s.p)[1], 1.0);
  scaler.update();  // no error without checks
  EXPECT_EQ(scaler.state_dict().size(), 0u);
  scaler.load_state_dict({});  // ignored
}

TEST(GradScaler, StateDictRoundTrip) {
  OneParameter s;
  GradScaler scaler({.init_scale = 1024.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 5});
  set_grad_values(s.p, {kInf, 1, 1});
  scaler.step(s.sgd);
  scaler.update();  // 256
  set_grad_values(s.p, {1, 1, 1});
  scaler.step(s.sgd);
  scaler.update();  // tracker 1
  TensorDict dict = scaler.state_dict();
  EXPECT_EQ(dict.at("scale").item<double>(), 256.0);
  EXPECT_EQ(dict.at("growth_factor").item<double>(), 3.0);
  EXPECT_EQ(dict.at("backoff_factor").item<double>(), 0.25);
  EXPECT_EQ(dict.at("growth_interval").item<int64_t>(), 5);
  EXPECT_EQ(dict.at("_growth_tracker").item<int64_t>(), 1);

  GradScaler restored;
  restored.load_state_dict(dict);
  EXPECT_EQ(restored.get_scale(), 256.0);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.get_growth_factor(), 3.0);
  EXPECT_EQ(restored.get_backoff_factor(), 0.25);
  EXPECT_EQ(restored.get_growth_interval(), 5);

  GradScaler fresh;
  expect_error([&] { fresh.load_state_dict({}); },
               "GradScaler::load_state_dict: the state dict is empty, possibly because it was saved from a disabled "
               "GradScaler");
  TensorDict missing;
  for (const auto& [key, t] : dict) {
    if (key != "_growth_tracker") missing.insert(key, t);
  }
  expect_error([&] { fresh.load_state_dict(missing); }, "GradScaler::load_state_dict: missing key '_growth_tracker'");
  TensorDict extra = dict;
  extra.insert("growth_tracker", scalar_tensor(0, DType::Int64));
  expect_error([&] { fresh.load_state_dict(extra); }, "GradScaler::load_state_dict: unexpected key 'growth_tracker'");
  TensorDict bad = dict;
  bad.insert_or_assign("_growth_tracker", scalar_tensor(5, DType::Int64));
  expect_error([&] { fresh.load_state_dict(bad); },
               "GradScaler::load_state_dict: _growth_tracker must be in [0, 5), got 5");
  EXPECT_EQ(fresh.get_scale(), 65536.0);  // unchanged by the failed loads
}

TEST(GradScaler, TrainingCheckpointKeepsTheScale) {
  nn::Linear model(3, 2);
  SGD sgd(model.parameters(), SGDOptions(0.1));
  GradScaler scaler({.init_scale = 512.0});
  for (const Tensor& p : model.parameters()) p.set_grad(full_like(p, kInf));
  scaler.step(sgd);
  scaler.update();  // 256
  const std::string path = ::testing::TempDir() + "/grad_scaler_checkpoint_" + std::to_string(getpid()) + ".safetensors";
  save_training_checkpoint(path, {model, sgd, nullptr, 7, {}, &scaler});

  nn::Linear model2(3, 2);
  SGD sgd2(model2.parameters(), SGDOptions(0.1));
  GradScaler scaler2;
  EXPECT_EQ(load_training_checkpoint(path, {model2, sgd2, nullptr, 0, {}, &scaler2}).step, 7);
  EXPECT_EQ(scaler2.get_scale(), 256.0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln
