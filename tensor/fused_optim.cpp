// Front-end of the fused optimizer steps (Note [Fused optimizer steps]):
// checks the lists and dispatches (Note [Device dispatch]).
#include "tensor/fused_optim.h"

namespace kiln::ops {

namespace {

// Why tensor i cannot be fused, or "" when it can.
std::string unfusable(const Tensor& param, const Tensor& grad, const Tensor* buf) {
  if (!param.defined() || !grad.defined()) return "a parameter or gradient is undefined";
  if (param.dtype() != DType::Float32 && param.dtype() != DType::Float64) {
    return detail::str("the parameter is ", param.dtype(), " (float32 or float64 only)");
  }
  // The CUDA kernel comes with the CUDA backend (issue 5).
  if (!param.device().is_cpu()) return detail::str("the parameter is on ", param.device(), " (CPU only so far)");
  for (const Tensor* t : {&grad, buf}) {
    if (t == nullptr) continue;
    if (!t->defined()) return "a momentum buffer is undefined";
    if (t->dtype() != param.dtype() || t->device() != param.device() || t->shape() != param.shape()) {
      return detail::str("a gradient or buffer is ", t->dtype(), " ", t->shape(), " on ", t->device(),
                         ", the parameter ", param.dtype(), " ", param.shape(), " on ", param.device());
    }
    if (!t->is_contiguous()) return "a gradient or buffer is not contiguous";
  }
  if (!param.is_contiguous()) return "the parameter is not contiguous";
  return "";
}

}  // namespace

bool sgd_step_fusable(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                      const std::vector<Tensor>& momentum_buffers) {
  if (params.size() != grads.size()) return false;
  if (!momentum_buffers.empty() && momentum_buffers.size() != params.size()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!unfusable(params[i], grads[i], momentum_buffers.empty() ? nullptr : &momentum_buffers[i]).empty()) {
      return false;
    }
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
    const std::string why = unfusable(params[i], grads[i], momentum ? &momentum_buffers[i] : nullptr);
    KILN_CHECK(why.empty(), "sgd_step_: cannot fuse parameter ", i, ": ", why);
  }
  if (params.empty()) return;
  backend_for(params[0].device()).sgd_step(params, grads, momentum_buffers, first_step, step);
  for (const Tensor& t : params) t.bump_version();
  for (const Tensor& t : momentum_buffers) t.bump_version();
}

}  // namespace kiln::ops
