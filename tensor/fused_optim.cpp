// Front-end of the fused optimizer steps (Note [Fused optimizer steps]):
// checks the lists and dispatches (Note [Device dispatch]).
#include "tensor/fused_optim.h"

#include <initializer_list>
#include <string>

namespace kiln::ops {

namespace {

// Why one parameter cannot be fused, or "" when it can; `state` lists its
// gradient and the optimizer's per-element buffers (null entries skipped),
// each of which must match the parameter.
std::string unfusable(const Tensor& param, const Tensor& grad, std::initializer_list<const Tensor*> state) {
  if (!param.defined() || !grad.defined()) return "a parameter or gradient is undefined";
  if (param.dtype() != DType::Float32 && param.dtype() != DType::Float64) {
    return detail::str("the parameter is ", param.dtype(), " (float32 or float64 only)");
  }
  if (!param.device().is_cpu() && !param.device().is_cuda()) {
    return detail::str("the parameter is on ", param.device(), " (CPU and CUDA only)");
  }
  for (const Tensor* t : state) {
    if (t == nullptr) continue;
    if (!t->defined()) return "a state tensor is undefined";
    if (t->dtype() != param.dtype() || t->device() != param.device() || t->shape() != param.shape()) {
      return detail::str("a gradient or buffer is ", t->dtype(), " ", t->shape(), " on ", t->device(),
                         ", the parameter ", param.dtype(), " ", param.shape(), " on ", param.device());
    }
    if (!t->is_contiguous()) return "a gradient or buffer is not contiguous";
  }
  if (!param.is_contiguous()) return "the parameter is not contiguous";
  return "";
}

// Why parameter i cannot join parameter 0's launch: one launch serves one device.
std::string other_device(const std::vector<Tensor>& params, size_t i) {
  if (i == 0 || params[i].device() == params[0].device()) return "";
  return detail::str("it is on ", params[i].device(), ", parameter 0 on ", params[0].device());
}

// Why parameter i's Adam tensors cannot be fused, or "" when they can.
std::string adam_unfusable(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                           const std::vector<Tensor>& max_exp_avg_sqs, size_t i) {
  const std::string why =
      unfusable(params[i], grads[i],
                {&grads[i], &exp_avgs[i], &exp_avg_sqs[i], max_exp_avg_sqs.empty() ? nullptr : &max_exp_avg_sqs[i]});
  return why.empty() ? other_device(params, i) : why;
}

// Why gradient i cannot be unscaled with gradient 0's launch, or "" when it can.
std::string unscale_unfusable(const std::vector<Tensor>& grads, size_t i) {
  const Tensor& g = grads[i];
  if (!g.defined()) return "it is undefined";
  if (g.dtype() != DType::Float32 && g.dtype() != DType::Float64) {
    return detail::str("it is ", g.dtype(), " (float32 or float64 only)");
  }
  if (!g.device().is_cpu() && !g.device().is_cuda()) return detail::str("it is on ", g.device());
  if (!g.is_contiguous()) return "it is not contiguous";
  return other_device(grads, i);
}

}  // namespace

bool sgd_step_fusable(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                      const std::vector<Tensor>& momentum_buffers) {
  if (params.size() != grads.size()) return false;
  if (!momentum_buffers.empty() && momentum_buffers.size() != params.size()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor* buffer = momentum_buffers.empty() ? nullptr : &momentum_buffers[i];
    if (!unfusable(params[i], grads[i], {&grads[i], buffer}).empty() || !other_device(params, i).empty()) return false;
  }
  return true;
}

void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_step, const SgdStep& step) {
  KILN_CHECK(grads.size() == params.size(), "sgd_step_: ", params.size(), " parameters but ", grads.size(),
             " gradients");
  const bool momentum = step.momentum != 0.0;
  KILN_CHECK(momentum ? momentum_buffers.size() == params.size() && first_step.size() == params.size()
                      : momentum_buffers.empty(),
             "sgd_step_: ", params.size(), " parameters, ", momentum_buffers.size(), " momentum buffers and ",
             first_step.size(), " first-step flags with momentum ", step.momentum);
  for (size_t i = 0; i < params.size(); ++i) {
    std::string why = unfusable(params[i], grads[i], {&grads[i], momentum ? &momentum_buffers[i] : nullptr});
    if (why.empty()) why = other_device(params, i);
    KILN_CHECK(why.empty(), "sgd_step_: cannot fuse parameter ", i, ": ", why);
  }
  if (params.empty()) return;
  backend_for(params[0].device()).sgd_step(params, grads, momentum_buffers, first_step, step);
  for (const Tensor& t : params) t.bump_version();
  for (const Tensor& t : momentum_buffers) t.bump_version();
}

bool adam_step_fusable(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<Tensor>& max_exp_avg_sqs) {
  const size_t n = params.size();
  if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n) return false;
  if (!max_exp_avg_sqs.empty() && max_exp_avg_sqs.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!adam_unfusable(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, i).empty()) return false;
  }
  return true;
}

void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& steps, const AdamStep& step) {
  const size_t n = params.size();
  KILN_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n &&
                 max_exp_avg_sqs.size() == (step.amsgrad ? n : 0),
             "adam_step_: ", n, " parameters, ", grads.size(), " gradients, ", exp_avgs.size(), " exp_avgs, ",
             exp_avg_sqs.size(), " exp_avg_sqs, ", max_exp_avg_sqs.size(), " max_exp_avg_sqs and ", steps.size(),
             " step counts with amsgrad ", step.amsgrad);
  for (size_t i = 0; i < n; ++i) {
    const std::string why = adam_unfusable(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, i);
    KILN_CHECK(why.empty(), "adam_step_: cannot fuse parameter ", i, ": ", why);
    KILN_CHECK(steps[i] >= 1.0, "adam_step_: parameter ", i, " has step count ", steps[i],
               " (the count including this step, >= 1)");
  }
  if (params.empty()) return;
  backend_for(params[0].device()).adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, step);
  for (const std::vector<Tensor>* list : {&params, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs}) {
    for (const Tensor& t : *list) t.bump_version();
  }
}

bool unscale_grads_fusable(const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!unscale_unfusable(grads, i).empty()) return false;
  }
  return true;
}

void unscale_grads_(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found_inf) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string why = unscale_unfusable(grads, i);
    KILN_CHECK(why.empty(), "unscale_grads_: cannot fuse gradient ", i, ": ", why);
  }
  if (grads.empty()) return;
  KILN_CHECK(found_inf.defined() && found_inf.dtype() == DType::Float32 && found_inf.numel() == 1 &&
                 found_inf.device() == grads[0].device(),
             "unscale_grads_: found_inf must be one float32 element on ", grads[0].device(), ", got ",
             found_inf.defined() ? detail::str(found_inf.dtype(), " ", found_inf.shape(), " on ", found_inf.device())
                                 : std::string("an undefined tensor"));
  backend_for(grads[0].device()).unscale_grads(grads, inv_scale, found_inf);
  for (const Tensor& t : grads) t.bump_version();
  found_inf.bump_version();
}

}  // namespace kiln::ops
