// SGD's update, step for step as torch.optim.sgd._single_tensor_sgd, so
// that each intermediate rounds to the parameter dtype where PyTorch's does.
#include "optim/sgd.h"

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace kiln::optim {

std::vector<OptionField<SGDOptions>> SGDOptions::fields() {
  return {{"lr", &SGDOptions::lr_},
          {"momentum", &SGDOptions::momentum_},
          {"dampening", &SGDOptions::dampening_},
          {"weight_decay", &SGDOptions::weight_decay_},
          {"nesterov", &SGDOptions::nesterov_},
          {"maximize", &SGDOptions::maximize_}};
}

void SGDOptions::validate(std::string_view op) const {
  KILN_CHECK(lr_ >= 0.0, op, ": invalid learning rate ", lr_, " (must be >= 0)");
  KILN_CHECK(momentum_ >= 0.0, op, ": invalid momentum ", momentum_, " (must be >= 0)");
  KILN_CHECK(weight_decay_ >= 0.0, op, ": invalid weight_decay ", weight_decay_, " (must be >= 0)");
  KILN_CHECK(!nesterov_ || (momentum_ > 0.0 && dampening_ == 0.0), op,
             ": nesterov momentum needs momentum > 0 and dampening = 0 (got momentum ", momentum_, ", dampening ",
             dampening_, ")");
}

SGD::SGD(const std::vector<Tensor>& params, SGDOptions defaults)
    : SGD(std::vector<ParamGroup>{{params, {}}}, defaults) {}

SGD::SGD(const std::vector<ParamGroup>& groups, SGDOptions defaults) : OptimizerWithOptions(defaults) {
  add_initial_groups(groups);
}

std::vector<StateEntry> SGD::state_entries(size_t) const {
  // Not required: a parameter whose group had no momentum so far has none,
  // and gets one from its gradient on the first step with momentum.
  return {{"momentum_buffer", /*per_element=*/true, /*required=*/false}};
}

// One fused kernel per parameter for group g, when its tensors allow it;
// returns false (having changed nothing) otherwise.
bool SGD::fused_step(size_t g) {
  const SGDOptions& o = options(g);
  std::vector<Tensor> params_with_grad, grads, buffers;
  std::vector<bool> first_step;
  for (const Tensor& param : params(g)) {
    Tensor grad = param.grad();
    if (!grad.defined()) continue;
    params_with_grad.push_back(param);
    grads.push_back(grad);
  }
  if (o.momentum() != 0.0) {
    for (const Tensor& param : params_with_grad) {
      const TensorDict& state = this->state(param);
      const bool first = !state.contains("momentum_buffer");
      // A fresh buffer is filled by the kernel with the first direction.
      buffers.push_back(first ? Tensor::empty(param.shape(), {param.dtype(), param.device()})
                              : state.at("momentum_buffer"));
      first_step.push_back(first);
    }
  }
  if (!ops::sgd_step_fusable(params_with_grad, grads, buffers)) return false;
  ops::sgd_step_(params_with_grad, grads, buffers, first_step,
                 {.lr = o.lr(),
                  .momentum = o.momentum(),
                  .dampening = o.dampening(),
                  .weight_decay = o.weight_decay(),
                  .nesterov = o.nesterov(),
                  .maximize = o.maximize()});
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (first_step[i]) mutable_state(params_with_grad[i]).insert("momentum_buffer", buffers[i]);
  }
  return true;
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const SGDOptions& o = options(g);
    if (o.fused() && fused_step(g)) continue;
    for (size_t j = 0; j < params(g).size(); ++j) {
      Tensor param = params(g)[j];
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      // d_p: the direction; a new tensor whenever it differs from the grad,
      // which the step never writes to.
      Tensor d_p = o.maximize() ? ops::neg(grad) : grad;
      if (o.weight_decay() != 0.0) d_p = ops::add(d_p, param, o.weight_decay());
      if (o.momentum() != 0.0) {
        TensorDict& state = mutable_state(param);
        if (!state.contains("momentum_buffer")) {
          state.insert("momentum_buffer", d_p.clone());
        } else {
          Tensor buf = state.at("momentum_buffer");
          ops::mul_(buf, o.momentum());
          ops::add_(buf, d_p, 1.0 - o.dampening());
        }
        const Tensor& buf = state.at("momentum_buffer");
        d_p = o.nesterov() ? ops::add(d_p, buf, o.momentum()) : buf;
      }
      ops::add_(param, d_p, -o.lr());
    }
  }
}

}  // namespace kiln::optim
