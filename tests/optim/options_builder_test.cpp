// The optimizers' option builders (Note [Option builders] in tensor/arg.h):
// the required lr is a constructor argument, every other field a chained
// setter and a getter; the fields behind them are the ones reached by name
// (Note [Hyperparameters by name]); out-of-range values still throw naming
// the optimizer and the field.
#include <map>
#include <string>
#include <vector>

#include "optim_test_util.h"

namespace kiln {
namespace {

std::vector<Tensor> two_params() { return {make_param({0.5, -1.0, 2.0}, {3}), make_param({0.25, -0.75}, {2})}; }

// Gives every parameter the same gradients for step `s`.
void set_grads(const std::vector<Tensor>& params, int s) {
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<double> g;
    for (int64_t k = 0; k < params[i].numel(); ++k) g.push_back(0.1 * (s + 1) - 0.3 * k + 0.05 * i);
    set_grad_values(params[i], g);
  }
}

// Steps `a` and `b` on the same gradients and expects bitwise equal
// parameters and equal state dicts (keys, shapes and values).
template <class Opt>
void expect_same_training(Opt& a, const std::vector<Tensor>& pa, Opt& b, const std::vector<Tensor>& pb) {
  for (int s = 0; s < 3; ++s) {
    set_grads(pa, s);
    set_grads(pb, s);
    a.step();
    b.step();
  }
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_values(pa[i], pb[i])) << "parameter " << i;
  const TensorDict da = a.state_dict(), db = b.state_dict();
  ASSERT_EQ(da.keys(), db.keys());
  for (const std::string& key : da.keys()) EXPECT_TRUE(same_values(da.at(key), db.at(key))) << key;
}

TEST(OptionsBuilder, SGDSetsEveryFieldInAnyOrder) {
  const SGDOptions o =
      SGDOptions(0.1).maximize(true).weight_decay(5e-4).nesterov(true).momentum(0.9).dampening(0.0).fused(false);
  EXPECT_EQ(o.lr(), 0.1);
  EXPECT_EQ(o.momentum(), 0.9);
  EXPECT_EQ(o.dampening(), 0.0);
  EXPECT_EQ(o.weight_decay(), 5e-4);
  EXPECT_TRUE(o.nesterov());
  EXPECT_TRUE(o.maximize());
  EXPECT_FALSE(o.fused());
  // The rest keep PyTorch's defaults.
  const SGDOptions d(0.2);
  EXPECT_EQ(d.lr(), 0.2);
  EXPECT_EQ(d.momentum(), 0.0);
  EXPECT_EQ(d.dampening(), 0.0);
  EXPECT_EQ(d.weight_decay(), 0.0);
  EXPECT_FALSE(d.nesterov());
  EXPECT_FALSE(d.maximize());
  EXPECT_TRUE(d.fused());
  // A setter changes a copy, not the options it was copied from.
  SGDOptions changed = d;
  changed.momentum(0.5);
  EXPECT_EQ(d.momentum(), 0.0);
  EXPECT_EQ(changed.momentum(), 0.5);
}

TEST(OptionsBuilder, SGDFromABareLearningRateIsSGDOptionsOfIt) {
  // LibTorch's SGD(params, lr): the lr converts to SGDOptions(lr).
  std::vector<Tensor> pa = two_params(), pb = two_params();
  SGD a(pa, 0.05);
  SGD b(pb, SGDOptions(0.05));
  EXPECT_EQ(a.defaults().lr(), 0.05);
  expect_same_training(a, pa, b, pb);
}

TEST(OptionsBuilder, SGDFieldsAreTheHyperparametersByName) {
  std::vector<Tensor> pa = two_params(), pb = two_params();
  SGD built(pa, SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01).maximize(true));
  EXPECT_EQ(built.hyperparameter_names(),
            (std::vector<std::string>{"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"}));
  EXPECT_EQ(built.hyperparameter(0, "lr"), 0.1);
  EXPECT_EQ(built.hyperparameter(0, "momentum"), 0.9);
  EXPECT_EQ(built.hyperparameter(0, "dampening"), 0.1);
  EXPECT_EQ(built.hyperparameter(0, "weight_decay"), 0.01);
  EXPECT_EQ(built.hyperparameter(0, "nesterov"), 0.0);
  EXPECT_EQ(built.hyperparameter(0, "maximize"), 1.0);
  // The same values written by name train the same.
  SGD by_name(pb, SGDOptions(0.5));
  by_name.set_hyperparameters(
      0, {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.01}, {"maximize", 1.0}});
  EXPECT_EQ(by_name.options(0).momentum(), 0.9);
  EXPECT_TRUE(by_name.options(0).maximize());
  expect_same_training(built, pa, by_name, pb);
  // options(g).lr(x) writes the group's value, unchecked, as group['lr'] = x.
  built.options(0).lr(-1.0);
  EXPECT_EQ(built.lr(0), -1.0);
}

TEST(OptionsBuilder, AdamSetsEveryField) {
  const AdamOptions o = AdamOptions(3e-4)
                            .beta1(0.8)
                            .beta2(0.95)
                            .eps(1e-6)
                            .weight_decay(0.1)
                            .amsgrad(true)
                            .maximize(true)
                            .decoupled_weight_decay(true)
                            .fused(false);
  EXPECT_EQ(o.lr(), 3e-4);
  EXPECT_EQ(o.beta1(), 0.8);
  EXPECT_EQ(o.beta2(), 0.95);
  EXPECT_EQ(o.eps(), 1e-6);
  EXPECT_EQ(o.weight_decay(), 0.1);
  EXPECT_TRUE(o.amsgrad());
  EXPECT_TRUE(o.maximize());
  EXPECT_TRUE(o.decoupled_weight_decay());
  EXPECT_FALSE(o.fused());
  // LibTorch's default lr and its betas pair.
  const AdamOptions d;
  EXPECT_EQ(d.lr(), 1e-3);
  EXPECT_EQ(d.betas(), std::make_tuple(0.9, 0.999));
  EXPECT_EQ(d.eps(), 1e-8);
  EXPECT_EQ(d.weight_decay(), 0.0);
  const AdamOptions b = AdamOptions(1e-3).betas({0.85, 0.9});
  EXPECT_EQ(b.beta1(), 0.85);
  EXPECT_EQ(b.beta2(), 0.9);
}

TEST(OptionsBuilder, AdamWIsAdamWithDecoupledDecayAndItsOwnDefault) {
  const AdamWOptions o = AdamWOptions(6e-4).betas({0.9, 0.95}).eps(1e-7).amsgrad(true).maximize(true).fused(false);
  EXPECT_EQ(o.weight_decay(), 1e-2);  // PyTorch's AdamW default
  EXPECT_EQ(o.beta2(), 0.95);
  std::vector<Tensor> pa = two_params(), pb = two_params();
  AdamW adamw(pa, o);
  const AdamOptions& seen = adamw.defaults();
  EXPECT_EQ(seen.lr(), 6e-4);
  EXPECT_EQ(seen.beta1(), 0.9);
  EXPECT_EQ(seen.beta2(), 0.95);
  EXPECT_EQ(seen.eps(), 1e-7);
  EXPECT_EQ(seen.weight_decay(), 1e-2);
  EXPECT_TRUE(seen.amsgrad());
  EXPECT_TRUE(seen.maximize());
  EXPECT_FALSE(seen.fused());
  EXPECT_TRUE(seen.decoupled_weight_decay());
  // The same as an AdamW made from a bare lr and every value set by name.
  AdamW by_name(pb, 6e-4);
  by_name.set_hyperparameters(0, {{"beta2", 0.95}, {"eps", 1e-7}, {"amsgrad", 1.0}, {"maximize", 1.0}});
  by_name.options(0).fused(false);
  expect_same_training(adamw, pa, by_name, pb);
}

TEST(OptionsBuilder, InvalidValuesNameTheOptimizerAndTheField) {
  const std::vector<Tensor> p = {make_param({1.0}, {1})};
  expect_error([&] { SGD(p, SGDOptions(-0.1)); }, "SGD: invalid learning rate -0.1 (must be >= 0)");
  expect_error([&] { SGD(p, SGDOptions(0.1).momentum(-1)); }, "SGD: invalid momentum -1 (must be >= 0)");
  expect_error([&] { SGD(p, SGDOptions(0.1).weight_decay(-2)); }, "SGD: invalid weight_decay -2 (must be >= 0)");
  expect_error([&] { SGD(p, SGDOptions(0.1).nesterov(true)); },
               "SGD: nesterov momentum needs momentum > 0 and dampening = 0 (got momentum 0, dampening 0)");
  expect_error([&] { Adam(p, AdamOptions().beta1(1.0)); }, "Adam: invalid beta1 1 (must be in [0, 1))");
  expect_error([&] { Adam(p, AdamOptions().betas({0.9, -0.5})); }, "Adam: invalid beta2 -0.5 (must be in [0, 1))");
  expect_error([&] { Adam(p, AdamOptions(-3)); }, "Adam: invalid learning rate -3 (must be >= 0)");
  expect_error([&] { AdamW(p, AdamWOptions().eps(-1)); }, "AdamW: invalid eps -1 (must be >= 0)");
  expect_error([&] { AdamW(p, AdamWOptions().weight_decay(-0.1)); }, "AdamW: invalid weight_decay -0.1 (must be >= 0)");
  // Set by name after construction: checked the same way, and nothing changes.
  SGD sgd(p, SGDOptions(0.1).momentum(0.9));
  expect_error(
      [&] {
        sgd.set_hyperparameters(0, {{"momentum", 0.0}, {"nesterov", 1.0}});
      },
      "SGD::set_hyperparameters: nesterov momentum needs momentum > 0");
  EXPECT_EQ(sgd.options(0).momentum(), 0.9);
  EXPECT_FALSE(sgd.options(0).nesterov());
}

}  // namespace
}  // namespace kiln
