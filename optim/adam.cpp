// Adam's and AdamW's update, step for step as torch.optim.adam's and
// adamw's _single_tensor paths, so that each intermediate rounds to the
// parameter dtype where PyTorch's does. The two differ only in where the
// weight decay goes (decoupled_weight_decay), so one class does both.
#include "optim/adam.h"

#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "autograd/grad_mode.h"
#include "tensor/backend.h"
#include "tensor/fused_optim.h"
#include "tensor/ops.h"

namespace kiln::optim {

namespace {

template <class Options>
void validate_adam(const Options& o, std::string_view op) {
  KILN_CHECK(o.lr() >= 0.0, op, ": invalid learning rate ", o.lr(), " (must be >= 0)");
  KILN_CHECK(o.eps() >= 0.0, op, ": invalid eps ", o.eps(), " (must be >= 0)");
  KILN_CHECK(o.beta1() >= 0.0 && o.beta1() < 1.0, op, ": invalid beta1 ", o.beta1(), " (must be in [0, 1))");
  KILN_CHECK(o.beta2() >= 0.0 && o.beta2() < 1.0, op, ": invalid beta2 ", o.beta2(), " (must be in [0, 1))");
  KILN_CHECK(o.weight_decay() >= 0.0, op, ": invalid weight_decay ", o.weight_decay(), " (must be >= 0)");
}

std::vector<StateEntry> adam_state_entries(bool amsgrad) {
  return {{"step", /*per_element=*/false, /*required=*/true},
          {"exp_avg", true, true},
          {"exp_avg_sq", true, true},
          {"max_exp_avg_sq", true, amsgrad}};
}

struct AdamHyperparameters {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
  bool decoupled_weight_decay;  // AdamW
};

AdamHyperparameters hyperparameters_of(const AdamOptions& o) {
  return {o.lr(),           o.beta1(),   o.beta2(),    o.eps(),
          o.weight_decay(), o.amsgrad(), o.maximize(), o.decoupled_weight_decay()};
}

// AdamW's options as the Adam options they stand for, validated under
// AdamW's name.
AdamOptions as_adam_options(const AdamWOptions& o) {
  o.validate("AdamW");
  return AdamOptions(o.lr())
      .beta1(o.beta1())
      .beta2(o.beta2())
      .eps(o.eps())
      .weight_decay(o.weight_decay())
      .amsgrad(o.amsgrad())
      .maximize(o.maximize())
      .decoupled_weight_decay(true)
      .fused(o.fused());
}

// One update of `param` from `grad`; `who()` describes the parameter in
// errors (and is only called for one).
void adam_update(Tensor param, const Tensor& grad, TensorDict& state, const AdamHyperparameters& h, std::string_view op,
                 const std::function<std::string()>& who) {
  if (state.empty()) {
    state.insert("step", scalar_tensor(0.0, DType::Float64));
    state.insert("exp_avg", zeros_like(param));
    state.insert("exp_avg_sq", zeros_like(param));
    if (h.amsgrad) state.insert("max_exp_avg_sq", zeros_like(param));
  }
  // PyTorch fails the same way: its state gains max_exp_avg_sq only on a
  // parameter's first step.
  KILN_CHECK(!h.amsgrad || state.contains("max_exp_avg_sq"), op, ": ", who(),
             " has no max_exp_avg_sq state: amsgrad was turned on after its first step");

  Tensor step_t = state.at("step");
  Tensor exp_avg = state.at("exp_avg");        // exp_avg: param's shape
  Tensor exp_avg_sq = state.at("exp_avg_sq");  // exp_avg_sq: param's shape

  Tensor g = h.maximize ? ops::neg(grad) : grad;
  ops::add_(step_t, 1);
  if (h.decoupled_weight_decay) {
    if (h.weight_decay != 0.0) ops::mul_(param, 1.0 - h.lr * h.weight_decay);
  } else if (h.weight_decay != 0.0) {
    g = ops::add(g, param, h.weight_decay);
  }

  ops::mul_(exp_avg, h.beta1);
  ops::add_(exp_avg, g, 1.0 - h.beta1);
  // PyTorch's addcmul_(g, g, value) computes (value * g) * g.
  ops::mul_(exp_avg_sq, h.beta2);
  ops::add_(exp_avg_sq, ops::mul(ops::mul(g, 1.0 - h.beta2), g));

  // The bias corrections are Python floats in PyTorch: float64 here too,
  // rounded to the parameter dtype only where they meet a tensor.
  const double step = step_t.item<double>();
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  const double step_size = h.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);

  Tensor second_moment = exp_avg_sq;
  if (h.amsgrad) {
    Tensor max_exp_avg_sq = state.at("max_exp_avg_sq");
    max_exp_avg_sq.copy_(ops::maximum(max_exp_avg_sq, exp_avg_sq));
    second_moment = max_exp_avg_sq;
  }
  Tensor denom = ops::div(ops::sqrt(second_moment), bias_correction2_sqrt);
  ops::add_(denom, h.eps);
  // PyTorch's addcdiv_(exp_avg, denom, value) computes (value * exp_avg) / denom.
  Tensor update = ops::mul(exp_avg, -step_size);
  ops::div_(update, denom);
  ops::add_(param, update);
}

// Adam's bias corrections come from the step count, read on the host at
// each step; a CUDA graph replay would repeat the captured step's
// corrections for ever. torch refuses such a capture too (unless the
// optimizer is made "capturable", which Kiln does not offer).
void refuse_capture(const std::vector<Tensor>& params, std::string_view op) {
  std::optional<Device> asked;  // a device is asked once: the parameters mostly share one
  for (const Tensor& param : params) {
    if (asked == param.device()) continue;
    asked = param.device();
    KILN_CHECK(!capturing(param.device()), op, ": cannot be captured in a CUDA graph (", param.device(),
               " is capturing): the bias corrections depend on the step count, which a replay would not advance; "
               "run the optimizer step outside the graph");
  }
}

// One fused step (ops::adam_step_) over the parameters of a group that have
// a gradient, when their tensors allow it; returns false, having changed
// nothing, otherwise (also for the cases that adam_update rejects, so that
// it reports them). `state_of` gives a parameter's mutable state.
bool adam_fused_update(const std::vector<Tensor>& group_params, const AdamHyperparameters& h,
                       const std::function<TensorDict&(const Tensor&)>& state_of) {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  std::vector<double> steps;
  std::vector<bool> fresh;  // no state yet: it is inserted only once the step is sure to be fused
  for (const Tensor& param : group_params) {
    Tensor grad = param.grad();
    if (!grad.defined()) continue;
    const TensorDict& state = state_of(param);
    const bool first = state.empty();
    if (!first && h.amsgrad && !state.contains("max_exp_avg_sq")) return false;
    params.push_back(param);
    grads.push_back(grad);
    fresh.push_back(first);
    exp_avgs.push_back(first ? zeros_like(param) : state.at("exp_avg"));
    exp_avg_sqs.push_back(first ? zeros_like(param) : state.at("exp_avg_sq"));
    if (h.amsgrad) max_exp_avg_sqs.push_back(first ? zeros_like(param) : state.at("max_exp_avg_sq"));
    steps.push_back((first ? 0.0 : state.at("step").item<double>()) + 1.0);
  }
  if (!ops::adam_step_fusable(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    TensorDict& state = state_of(params[i]);
    if (fresh[i]) {
      state.insert("step", scalar_tensor(0.0, DType::Float64));
      state.insert("exp_avg", exp_avgs[i]);
      state.insert("exp_avg_sq", exp_avg_sqs[i]);
      if (h.amsgrad) state.insert("max_exp_avg_sq", max_exp_avg_sqs[i]);
    }
    Tensor step_t = state.at("step");
    ops::add_(step_t, 1);
  }
  ops::adam_step_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps,
                  {.lr = h.lr, .beta1 = h.beta1, .beta2 = h.beta2, .eps = h.eps, .weight_decay = h.weight_decay,
                   .amsgrad = h.amsgrad, .maximize = h.maximize, .decoupled = h.decoupled_weight_decay});
  return true;
}

}  // namespace

std::vector<OptionField<AdamOptions>> AdamOptions::fields() {
  using Options = AdamOptions;
  return {{"lr", &Options::lr_},
          {"beta1", &Options::beta1_},
          {"beta2", &Options::beta2_},
          {"eps", &Options::eps_},
          {"weight_decay", &Options::weight_decay_},
          {"amsgrad", &Options::amsgrad_},
          {"maximize", &Options::maximize_}};
}

void AdamOptions::validate(std::string_view op) const { validate_adam(*this, op); }
void AdamWOptions::validate(std::string_view op) const { validate_adam(*this, op); }

Adam::Adam(const std::vector<Tensor>& params, AdamOptions defaults)
    : Adam(std::vector<ParamGroup>{{params, {}}}, defaults) {}

Adam::Adam(const std::vector<ParamGroup>& groups, AdamOptions defaults) : Adam(groups, defaults, "Adam") {}

// The name is set before the groups are added, so that their errors name
// AdamW as such.
Adam::Adam(const std::vector<ParamGroup>& groups, AdamOptions defaults, std::string name)
    : OptimizerWithOptions(defaults), name_(std::move(name)) {
  add_initial_groups(groups);
}

std::vector<StateEntry> Adam::state_entries(size_t group) const { return adam_state_entries(options(group).amsgrad()); }

void Adam::step() {
  NoGradGuard no_grad;
  const std::string op = name_ + "::step";
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const AdamHyperparameters h = hyperparameters_of(options(g));
    refuse_capture(params(g), op);
    if (options(g).fused() &&
        adam_fused_update(params(g), h, [&](const Tensor& param) -> TensorDict& { return mutable_state(param); })) {
      continue;
    }
    for (size_t j = 0; j < params(g).size(); ++j) {
      const Tensor& param = params(g)[j];
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      adam_update(param, grad, mutable_state(param), h, op, [&] { return describe_param(g, j); });
    }
  }
}

AdamW::AdamW(const std::vector<Tensor>& params, AdamWOptions defaults)
    : AdamW(std::vector<ParamGroup>{{params, {}}}, defaults) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, AdamWOptions defaults)
    : Adam(groups, as_adam_options(defaults), "AdamW") {}

}  // namespace kiln::optim
