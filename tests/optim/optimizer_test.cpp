// The Optimizer base: param groups, zero_grad, hyperparameters by name and
// the state dict (Note [Optimizer state dict]).
#include "optim/optimizer.h"

#include "autograd/ops.h"
#include "optim_test_util.h"

namespace kiln {

using namespace kiln::optim;
namespace {

// Copies of every tensor, as saving the dict to a file would make.
TensorDict clone_dict(const TensorDict& dict) {
  TensorDict out;
  for (const auto& [key, t] : dict) out.insert(key, t.clone());
  return out;
}

// `dict` without `key`, or with `key` replaced by `replacement`.
TensorDict edited(const TensorDict& dict, const std::string& key, const Tensor& replacement = Tensor()) {
  TensorDict out;
  for (const auto& [k, t] : dict) {
    if (k != key) {
      out.insert(k, t);
    } else if (replacement.defined()) {
      out.insert(k, replacement);
    }
  }
  return out;
}

std::vector<Tensor> fresh_params(DType dtype = DType::Float32) {
  return {make_param(pseudo_random(6, -1, 1, 1), {2, 3}, dtype), make_param(pseudo_random(4, -1, 1, 2), {4}, dtype),
          make_param(pseudo_random(3, -1, 1, 3), {3}, dtype)};
}

void set_step_grads(const std::vector<Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i)
    set_grad_values(params[i], pseudo_random(params[i].numel(), -1, 1, 7 * step + i));
}

TEST(Optimizer, ZeroGradSetsToNoneByDefault) {
  std::vector<Tensor> params = fresh_params();
  SGD opt(params, SGDOptions(0.1));
  set_step_grads(params, 0);
  opt.zero_grad();
  for (const Tensor& p : params) EXPECT_FALSE(p.grad().defined());
  opt.zero_grad();  // no grads at all: nothing to do
}

TEST(Optimizer, ZeroGradWithoutSetToNoneZeroesInPlace) {
  std::vector<Tensor> params = fresh_params();
  SGD opt(params, SGDOptions(0.1));
  set_step_grads(params, 0);
  Tensor before = params[0].grad();
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(params[0].grad().defined());
  EXPECT_TRUE(params[0].grad().is_same(before));
  EXPECT_EQ(values_of(before), std::vector<double>(6, 0.0));
  EXPECT_EQ(values_of(params[1].grad()), std::vector<double>(4, 0.0));
}

TEST(Optimizer, ZeroGradDetachesAGradThatCarriesAGraph) {
  Tensor w = make_param({1.0, 2.0}, {2});
  kiln::sum(kiln::mul(w, w)).backward(Tensor(), /*retain_graph=*/false, /*create_graph=*/true);
  Tensor grad = w.grad();
  ASSERT_TRUE(grad.requires_grad());  // 2w, with its own graph
  SGD opt({w}, SGDOptions(0.1));
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_FALSE(w.grad().requires_grad());
  EXPECT_TRUE(w.grad().is_leaf());
  EXPECT_EQ(values_of(w.grad()), (std::vector<double>{0.0, 0.0}));
}

TEST(Optimizer, WeightDecayGroupsSplitMatricesFromVectorsAsNanoGpt) {
  Tensor weight = make_param({1, 2, 3, 4}, {2, 2}), bias = make_param({1, 2}, {2});
  Tensor embedding = make_param({1, 2, 3, 4, 5, 6}, {3, 2}), norm_weight = make_param({1}, {1});
  Tensor frozen = make_param({1, 2, 3, 4}, {2, 2});
  frozen.requires_grad_(false);
  std::vector<ParamGroup> groups = weight_decay_groups({weight, bias, embedding, norm_weight, frozen}, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[0].params.size(), 2u);
  EXPECT_TRUE(groups[0].params[0].is_same(weight) && groups[0].params[1].is_same(embedding));
  ASSERT_EQ(groups[1].params.size(), 2u);
  EXPECT_TRUE(groups[1].params[0].is_same(bias) && groups[1].params[1].is_same(norm_weight));
  AdamW opt(groups, AdamWOptions().weight_decay(0.5));
  EXPECT_EQ(opt.hyperparameter(0, "weight_decay"), 0.1);
  EXPECT_EQ(opt.hyperparameter(1, "weight_decay"), 0.0);
}

TEST(Optimizer, AddParamGroupChecksParameters) {
  std::vector<Tensor> params = fresh_params();
  SGD opt({params[0]}, SGDOptions(0.1));
  expect_error(
      [&] {
        opt.add_param_group({{params[1], params[0]}});
      },
      "SGD::add_param_group: parameter 1 of the new group is already in a param group (or twice in this one)");
  expect_error([&] { opt.add_param_group({{params[1], params[1]}}); }, "parameter 1 of the new group is already");
  expect_error([&] { opt.add_param_group({{Tensor()}}); },
               "SGD::add_param_group: parameter 0 of the new group is undefined");
  expect_error(
      [&] {
        opt.add_param_group({{from_vector<int64_t>({1, 2})}});
      },
      "SGD::add_param_group: parameter 0 of the new group has dtype int64; only floating-point tensors can "
      "be optimized");
  Tensor non_leaf = kiln::mul(params[1], 2.0);
  expect_error([&] { opt.add_param_group({{non_leaf}}); },
               "SGD::add_param_group: parameter 0 of the new group is not a leaf (it was computed by MulBackward");
  expect_error(
      [&] {
        opt.add_param_group({{params[1]}, {{"lr", -1.0}}});
      },
      "SGD::add_param_group: invalid learning rate -1");
  expect_error(
      [&] {
        opt.add_param_group({{params[1]}, {{"betas", 0.9}}});
      },
      "SGD::add_param_group: unknown hyperparameter 'betas' (SGD has: lr, momentum, dampening, "
      "weight_decay, nesterov, maximize)");
  EXPECT_EQ(opt.num_param_groups(), 1u);  // every refusal left the optimizer as it was
  opt.add_param_group({{params[1], params[2]}, {{"lr", 0.01}, {"momentum", 0.9}}});
  EXPECT_EQ(opt.num_param_groups(), 2u);
  EXPECT_EQ(opt.params(1).size(), 2u);
  EXPECT_EQ(opt.lr(1), 0.01);
  EXPECT_EQ(opt.hyperparameter(1, "momentum"), 0.9);
  expect_error([&] { SGD(std::vector<Tensor>{}, SGDOptions(1e-3)); }, "SGD: got an empty parameter list");
  expect_error([&] { opt.params(2); }, "SGD: no param group 2 (there are 2)");
}

TEST(Optimizer, HyperparametersByName) {
  std::vector<Tensor> params = fresh_params();
  Adam opt(params, AdamOptions(0.01).amsgrad(true));
  EXPECT_EQ(opt.hyperparameter_names(),
            (std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize"}));
  EXPECT_TRUE(opt.has_hyperparameter("beta1"));
  EXPECT_FALSE(opt.has_hyperparameter("momentum"));
  EXPECT_EQ(opt.hyperparameter(0, "amsgrad"), 1.0);
  opt.set_hyperparameters(0, {{"beta1", 0.5}, {"lr", 0.2}});
  EXPECT_EQ(opt.options(0).beta1(), 0.5);
  EXPECT_EQ(opt.lr(0), 0.2);
  expect_error([&] { opt.hyperparameter(0, "momentum"); }, "Adam::hyperparameter: unknown hyperparameter 'momentum'");
  expect_error(
      [&] {
        opt.set_hyperparameters(0, {{"lr", 0.3}, {"beta2", 1.5}});
      },
      "Adam::set_hyperparameters: invalid beta2 1.5");
  EXPECT_EQ(opt.lr(0), 0.2);  // nothing changed
}

TEST(Optimizer, StateDictLayout) {
  std::vector<Tensor> params = fresh_params();
  SGD opt({ParamGroup{{params[0], params[1]}}, ParamGroup{{params[2]}, {{"lr", 0.5}}}}, SGDOptions(0.1).momentum(0.9));
  set_step_grads({params[0], params[2]}, 0);  // params[1] gets no grad and so no state
  opt.step();
  TensorDict dict = opt.state_dict();
  EXPECT_EQ(dict.keys(),
            (std::vector<std::string>{
                "state.0.momentum_buffer", "state.2.momentum_buffer", "param_groups.0.params", "param_groups.0.lr",
                "param_groups.0.momentum", "param_groups.0.dampening", "param_groups.0.weight_decay",
                "param_groups.0.nesterov", "param_groups.0.maximize", "param_groups.1.params", "param_groups.1.lr",
                "param_groups.1.momentum", "param_groups.1.dampening", "param_groups.1.weight_decay",
                "param_groups.1.nesterov", "param_groups.1.maximize"}));
  EXPECT_EQ(values_of(dict.at("param_groups.0.params")), (std::vector<double>{0, 1}));
  EXPECT_EQ(values_of(dict.at("param_groups.1.params")), (std::vector<double>{2}));
  EXPECT_EQ(dict.at("param_groups.0.params").dtype(), DType::Int64);
  EXPECT_EQ(dict.at("param_groups.1.lr").dtype(), DType::Float64);
  EXPECT_EQ(dict.at("param_groups.1.lr").dim(), 0);
  EXPECT_EQ(dict.at("param_groups.1.lr").item<double>(), 0.5);
  EXPECT_EQ(dict.at("param_groups.0.momentum").item<double>(), 0.9);
  // The optimizer's own buffer, as PyTorch's state_dict gives.
  EXPECT_TRUE(dict.at("state.2.momentum_buffer").is_same(opt.state(params[2]).at("momentum_buffer")));

  Adam adam(params, AdamOptions());
  set_step_grads(params, 0);
  adam.step();
  TensorDict adam_dict = adam.state_dict();
  EXPECT_EQ(adam_dict.at("state.1.step").dtype(), DType::Float64);
  EXPECT_EQ(adam_dict.at("state.1.step").item<double>(), 1.0);
  EXPECT_TRUE(adam_dict.contains("state.1.exp_avg"));
  EXPECT_TRUE(adam_dict.contains("state.1.exp_avg_sq"));
  EXPECT_FALSE(adam_dict.contains("state.1.max_exp_avg_sq"));
  EXPECT_EQ(adam_dict.at("param_groups.0.beta2").item<double>(), 0.999);
}

// Trains `steps` steps, saves, trains `steps` more; a second optimizer over
// copies of the saved parameters loads the dict and trains the same steps:
// parameters and state must agree bit for bit.
template <class Optim, class Options>
void check_round_trip(const Options& options, const std::map<std::string, double>& second_group) {
  std::vector<Tensor> a = fresh_params();
  Optim first({ParamGroup{{a[0], a[1]}}, ParamGroup{{a[2]}, second_group}}, options);
  for (int s = 0; s < 3; ++s) {
    set_step_grads(a, s);
    first.step();
  }
  TensorDict saved = clone_dict(first.state_dict());
  std::vector<Tensor> b;
  for (const Tensor& p : a) b.push_back(make_param(values_of(p), p.shape()));
  // Constructed with other hyperparameters: the dict restores them.
  Options other = options;
  other.lr(123.0);
  Optim second({ParamGroup{{b[0], b[1]}}, ParamGroup{{b[2]}}}, other);
  second.load_state_dict(saved);
  EXPECT_EQ(second.lr(0), options.lr());
  EXPECT_EQ(second.lr(1), first.lr(1));
  for (int s = 3; s < 6; ++s) {
    set_step_grads(a, s);
    set_step_grads(b, s);
    first.step();
    second.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(same_values(a[i], b[i])) << "param " << i;
    for (const auto& [name, t] : first.state(a[i]))
      EXPECT_TRUE(same_values(t, second.state(b[i]).at(name))) << "param " << i << " " << name;
    EXPECT_EQ(first.state(a[i]).keys(), second.state(b[i]).keys());
  }
}

TEST(Optimizer, StateDictRoundTripContinuesBitwise) {
  check_round_trip<SGD>(SGDOptions(0.1).momentum(0.9).weight_decay(0.01), {{"lr", 0.05}});
  check_round_trip<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true), {{"momentum", 0.5}});
  check_round_trip<Adam>(AdamOptions(0.01).weight_decay(0.1), {{"lr", 0.001}});
  check_round_trip<Adam>(AdamOptions(0.01).amsgrad(true), {{"beta1", 0.5}});
  check_round_trip<AdamW>(AdamWOptions(0.01).amsgrad(true), {{"weight_decay", 0.3}});
}

TEST(Optimizer, LoadStateDictCopiesWhatItLoads) {
  std::vector<Tensor> a = fresh_params();
  SGD first(a, SGDOptions(0.1).momentum(0.9));
  set_step_grads(a, 0);
  first.step();
  TensorDict saved = first.state_dict();
  std::vector<Tensor> b = fresh_params(DType::Float64);
  SGD second(b, SGDOptions(0.1).momentum(0.9));
  second.load_state_dict(saved);
  const Tensor& buf = second.state(b[0]).at("momentum_buffer");
  EXPECT_FALSE(buf.is_same(saved.at("state.0.momentum_buffer")));
  EXPECT_EQ(buf.dtype(), DType::Float64);  // converted to the parameter's dtype, as PyTorch does
  expect_near_all(values_of(buf), values_of(saved.at("state.0.momentum_buffer")), 0, 0, "buffer");
}

TEST(Optimizer, LoadStateDictRejectsMismatches) {
  std::vector<Tensor> a = fresh_params();
  Adam first({ParamGroup{{a[0], a[1]}}, ParamGroup{{a[2]}}}, AdamOptions(0.01).amsgrad(true));
  set_step_grads(a, 0);
  first.step();
  const TensorDict saved = clone_dict(first.state_dict());

  std::vector<Tensor> b = fresh_params();
  Adam one_group(b, AdamOptions().amsgrad(true));
  expect_error([&] { one_group.load_state_dict(saved); },
               "Adam::load_state_dict: the state dict has 2 param groups but the optimizer has 1");

  Adam other_split({ParamGroup{{b[0]}}, ParamGroup{{b[1], b[2]}}}, AdamOptions().amsgrad(true));
  expect_error([&] { other_split.load_state_dict(saved); },
               "Adam::load_state_dict: 'param_groups.0.params' lists 2 parameters but group 0 of the optimizer has 1");

  std::vector<Tensor> c = {make_param(pseudo_random(6, -1, 1), {3, 2}), b[1], b[2]};
  Adam reshaped({ParamGroup{{c[0], c[1]}}, ParamGroup{{c[2]}}}, AdamOptions(0.5).amsgrad(true));
  expect_error([&] { reshaped.load_state_dict(saved); },
               "Adam::load_state_dict: 'state.0.exp_avg' has shape [2, 3] but parameter 0 has shape [3, 2]");
  EXPECT_EQ(reshaped.lr(0), 0.5);  // the refusal came after the groups were read: they were put back
  EXPECT_TRUE(reshaped.state(c[1]).empty());

  Adam target({ParamGroup{{b[0], b[1]}}, ParamGroup{{b[2]}}}, AdamOptions().amsgrad(true));
  expect_error([&] { target.load_state_dict(edited(saved, "param_groups.1.eps")); },
               "Adam::load_state_dict: missing key 'param_groups.1.eps'");
  expect_error([&] { target.load_state_dict(edited(saved, "param_groups.0.params")); },
               "Adam::load_state_dict: missing key 'param_groups.0.params'");
  expect_error([&] { target.load_state_dict(edited(saved, "state.1.exp_avg_sq")); },
               "Adam::load_state_dict: missing key 'state.1.exp_avg_sq'");
  // amsgrad is on, so its buffer is required too.
  expect_error([&] { target.load_state_dict(edited(saved, "state.2.max_exp_avg_sq")); },
               "Adam::load_state_dict: missing key 'state.2.max_exp_avg_sq'");
  TensorDict extra = clone_dict(saved);
  extra.insert("state.0.momentum_buffer", zeros({2, 3}));
  expect_error([&] { target.load_state_dict(extra); },
               "Adam::load_state_dict: unexpected key 'state.0.momentum_buffer' (Adam keeps: step, exp_avg, "
               "exp_avg_sq, max_exp_avg_sq)");
  TensorDict extra_group_key = clone_dict(saved);
  extra_group_key.insert("param_groups.0.momentum", scalar_tensor(0.9, DType::Float64));
  expect_error([&] { target.load_state_dict(extra_group_key); },
               "Adam::load_state_dict: unexpected key 'param_groups.0.momentum' (Adam has: lr, beta1");
  TensorDict stray = clone_dict(saved);
  stray.insert("lr", scalar_tensor(0.1, DType::Float64));
  expect_error([&] { target.load_state_dict(stray); }, "Adam::load_state_dict: unexpected key 'lr'");
  TensorDict unknown_param = clone_dict(saved);
  unknown_param.insert("state.7.step", scalar_tensor(1.0, DType::Float64));
  expect_error([&] { target.load_state_dict(unknown_param); },
               "Adam::load_state_dict: 'state.7.step' is for parameter 7, which no param group lists");
  expect_error([&] { target.load_state_dict(edited(saved, "param_groups.0.lr", zeros({2}))); },
               "Adam::load_state_dict: 'param_groups.0.lr' must hold one number, got shape [2]");
  expect_error([&] { target.load_state_dict(edited(saved, "param_groups.1.amsgrad", scalar_tensor(0.5))); },
               "Adam::load_state_dict: 'amsgrad' is a flag and must be 0 or 1, got 0.5");
  // After all these refusals the target still has its own hyperparameters and no state.
  EXPECT_EQ(target.lr(0), 1e-3);
  EXPECT_TRUE(target.state(b[0]).empty());
  target.load_state_dict(saved);
  EXPECT_EQ(target.lr(0), 0.01);
  EXPECT_EQ(target.state(b[0]).at("step").item<double>(), 1.0);
}

TEST(Optimizer, LoadStateDictMapsSavedIdsByPosition) {
  // PyTorch pairs the saved ids with the current parameters in order, so a
  // dict whose ids are not 0..n-1 still loads.
  std::vector<Tensor> a = fresh_params();
  SGD opt({a[0]}, SGDOptions(0.1).momentum(0.9));
  TensorDict dict = opt.state_dict();
  TensorDict renumbered = edited(dict, "param_groups.0.params", from_vector<int64_t>({5}, {1}));
  renumbered.insert("state.5.momentum_buffer", full({2, 3}, 0.5));
  opt.load_state_dict(renumbered);
  EXPECT_EQ(values_of(opt.state(a[0]).at("momentum_buffer")), std::vector<double>(6, 0.5));
}

}  // namespace
}  // namespace kiln
