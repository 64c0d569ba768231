// SGD against a float64 transcription of torch.optim.SGD's update.
#include "optim/sgd.h"

#include "optim_test_util.h"

namespace kiln {

using namespace kiln::optim;
namespace {

// PyTorch's SGD update for one parameter, in float64.
struct SGDReference {
  SGDOptions o;
  std::vector<double> buf;

  void step(std::vector<double>& p, std::vector<double> g) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (o.maximize()) g[i] = -g[i];
      g[i] += o.weight_decay() * p[i];
    }
    if (o.momentum() != 0.0) {
      if (buf.empty()) {
        buf = g;
      } else {
        for (size_t i = 0; i < p.size(); ++i) buf[i] = o.momentum() * buf[i] + (1.0 - o.dampening()) * g[i];
      }
      for (size_t i = 0; i < p.size(); ++i) g[i] = o.nesterov() ? g[i] + o.momentum() * buf[i] : buf[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= o.lr() * g[i];
  }
};

// Runs SGD on two parameters for `steps` steps and checks every step
// against the float64 reference.
void check_sgd(const SGDOptions& options, DType dtype, double rtol, int steps = 5) {
  std::vector<std::vector<double>> values = {pseudo_random(6, -1, 1, 11), pseudo_random(4, -1, 1, 12)};
  if (dtype == DType::Float32) values = {as_float32(values[0]), as_float32(values[1])};
  std::vector<Tensor> params = {make_param(values[0], {2, 3}, dtype), make_param(values[1], {4}, dtype)};
  SGD opt(params, options);
  std::vector<SGDReference> refs(2, SGDReference{options, {}});
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<double> g = pseudo_random(params[i].numel(), -2, 2, 100 * s + i);
      if (dtype == DType::Float32) g = as_float32(g);
      set_grad_values(params[i], g);
      refs[i].step(values[i], g);
    }
    opt.step();
    for (size_t i = 0; i < params.size(); ++i)
      expect_near_all(values_of(params[i]), values[i], rtol, rtol * 1e-2,
                      "step " + std::to_string(s) + " param " + std::to_string(i));
  }
}

TEST(SGD, PlainStepIsParamMinusLrTimesGrad) {
  Tensor p = make_param({1.0, -2.0, 3.0}, {3});
  SGD opt({p}, SGDOptions(0.5));
  set_grad_values(p, {0.25, 1.0, -4.0});
  opt.step();
  EXPECT_EQ(values_of(p), (std::vector<double>{0.875, -2.5, 5.0}));
  EXPECT_TRUE(opt.state(p).empty());  // no momentum, no state
}

TEST(SGD, MatchesReferenceFloat64AndFloat32) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    double rtol = dtype == DType::Float64 ? 1e-13 : 2e-6;
    SCOPED_TRACE(detail::str(dtype));
    check_sgd(SGDOptions(0.1), dtype, rtol);
    check_sgd(SGDOptions(0.05).momentum(0.9), dtype, rtol);
    check_sgd(SGDOptions(0.05).momentum(0.9).dampening(0.3).weight_decay(0.01), dtype, rtol);
    check_sgd(SGDOptions(0.05).momentum(0.8).weight_decay(0.1).nesterov(true), dtype, rtol);
    check_sgd(SGDOptions(0.05).momentum(0.5).maximize(true), dtype, rtol);
    check_sgd(SGDOptions(0.02).weight_decay(0.5).maximize(true), dtype, rtol);
  }
}

TEST(SGD, FirstMomentumStepClonesTheGradWithoutDampening) {
  Tensor p = make_param({1.0, 2.0}, {2}, DType::Float64);
  SGD opt({p}, SGDOptions(0.1).momentum(0.9).dampening(0.5).weight_decay(0.25));
  set_grad_values(p, {0.5, -1.0});
  opt.step();
  // buf = g + wd * p (no (1 - dampening) factor), and a copy, not the grad.
  const Tensor& buf = opt.state(p).at("momentum_buffer");
  EXPECT_EQ(values_of(buf), (std::vector<double>{0.75, -0.5}));
  EXPECT_FALSE(buf.is_same(p.grad()));
  EXPECT_EQ(values_of(p.grad()), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(values_of(p), (std::vector<double>{1.0 - 0.1 * 0.75, 2.0 + 0.1 * 0.5}));
  // Second step: buf = 0.9 buf + 0.5 g'.
  set_grad_values(p, {1.0, 1.0});
  opt.step();
  std::vector<double> p1 = {1.0 - 0.1 * 0.75, 2.0 + 0.1 * 0.5};
  std::vector<double> g2 = {1.0 + 0.25 * p1[0], 1.0 + 0.25 * p1[1]};
  std::vector<double> buf2 = {0.9 * 0.75 + 0.5 * g2[0], 0.9 * -0.5 + 0.5 * g2[1]};
  expect_near_all(values_of(opt.state(p).at("momentum_buffer")), buf2, 1e-15, 0, "buf");
  expect_near_all(values_of(p), {p1[0] - 0.1 * buf2[0], p1[1] - 0.1 * buf2[1]}, 1e-15, 0, "param");
}

TEST(SGD, ParametersWithoutGradAreSkipped) {
  Tensor a = make_param({1.0, 2.0}, {2});
  Tensor b = make_param({3.0}, {1});
  SGD opt({a, b}, SGDOptions(1.0).momentum(0.9));
  set_grad_values(a, {1.0, 1.0});
  opt.step();
  EXPECT_EQ(values_of(a), (std::vector<double>{0.0, 1.0}));
  EXPECT_EQ(values_of(b), (std::vector<double>{3.0}));
  EXPECT_TRUE(opt.state(a).contains("momentum_buffer"));
  EXPECT_TRUE(opt.state(b).empty());
}

TEST(SGD, ParamGroupsUseTheirOwnLr) {
  Tensor a = make_param({1.0}, {1});
  Tensor b = make_param({1.0}, {1});
  SGD opt({ParamGroup{{a}}, ParamGroup{{b}, {{"lr", 0.25}}}}, SGDOptions(0.5).momentum(0.0));
  EXPECT_EQ(opt.num_param_groups(), 2u);
  EXPECT_EQ(opt.lr(0), 0.5);
  EXPECT_EQ(opt.lr(1), 0.25);
  EXPECT_EQ(opt.options(1).momentum(), 0.0);  // not overridden: the default
  set_grad_values(a, {1.0});
  set_grad_values(b, {1.0});
  opt.step();
  EXPECT_EQ(values_of(a), (std::vector<double>{0.5}));
  EXPECT_EQ(values_of(b), (std::vector<double>{0.75}));
}

TEST(SGD, RejectsInvalidHyperparameters) {
  Tensor p = make_param({1.0}, {1});
  expect_error([&] { SGD({p}, SGDOptions(-0.1)); }, "SGD: invalid learning rate -0.1 (must be >= 0)");
  expect_error([&] { SGD({p}, SGDOptions(1e-3).momentum(-0.5)); }, "SGD: invalid momentum -0.5 (must be >= 0)");
  expect_error([&] { SGD({p}, SGDOptions(1e-3).weight_decay(-1)); }, "SGD: invalid weight_decay -1 (must be >= 0)");
  expect_error([&] { SGD({p}, SGDOptions(1e-3).nesterov(true)); },
               "SGD: nesterov momentum needs momentum > 0 and dampening = 0 (got momentum 0, dampening 0)");
  expect_error([&] { SGD({p}, SGDOptions(1e-3).momentum(0.9).dampening(0.1).nesterov(true)); },
               "(got momentum 0.9, dampening 0.1)");
  SGD opt({p}, SGDOptions(0.1).momentum(0.9).nesterov(true));
  expect_error([&] { opt.set_hyperparameter(0, "momentum", 0.0); },
               "SGD::set_hyperparameters: nesterov momentum needs momentum > 0");
  EXPECT_EQ(opt.hyperparameter(0, "momentum"), 0.9);  // unchanged after the refusal
  expect_error([&] { opt.set_hyperparameter(0, "nesterov", 0.5); },
               "SGD::set_hyperparameters: 'nesterov' is a flag and must be 0 or 1, got 0.5");
}

}  // namespace
}  // namespace kiln
