// Stochastic gradient descent with momentum, dampening, weight decay and
// Nesterov momentum, as torch.optim.SGD.
//
//   SGD opt(model.parameters(), SGDOptions(0.1).momentum(0.9).weight_decay(5e-4));
//   SGD plain(model.parameters(), 0.1);   // SGDOptions(0.1), as LibTorch
//
// Per parameter p with gradient g, in p's dtype and in this order:
//   g = -g                                 if maximize
//   g = g + weight_decay * p               if weight_decay != 0
//   if momentum != 0:
//     buf = clone(g)                       on the first step (no dampening)
//     buf = momentum * buf + (1 - dampening) * g   afterwards
//     g = g + momentum * buf               if nesterov, else g = buf
//   p = p - lr * g
// State: "momentum_buffer" once a step with momentum has run.
#pragma once

#include <string_view>
#include <vector>

#include "optim/optimizer.h"
#include "tensor/arg.h"

namespace kiln::optim {

// lr is required, as LibTorch's SGDOptions(lr); the rest are chained
// setters with PyTorch's defaults (Note [Option builders] in tensor/arg.h).
class SGDOptions {
 public:
  static constexpr const char* kOptimizerName = "SGD";

  SGDOptions(double lr) : lr_(lr) {}  // NOLINT: implicit, so that SGD(params, 0.1) reads as LibTorch's

  static std::vector<OptionField<SGDOptions>> fields();
  // Throws naming `op` for a negative lr, momentum or weight decay, or for
  // nesterov without momentum or with dampening.
  void validate(std::string_view op) const;

  KILN_ARG(double, lr);
  KILN_ARG(double, momentum) = 0.0;
  KILN_ARG(double, dampening) = 0.0;
  KILN_ARG(double, weight_decay) = 0.0;
  KILN_ARG(bool, nesterov) = false;
  KILN_ARG(bool, maximize) = false;
  // Update the parameters with one fused kernel each where their tensors
  // allow it (Note [Fused optimizer steps] in tensor/fused_optim.h); the
  // results are bitwise those of the unfused ops. Not part of state dicts.
  KILN_ARG(bool, fused) = true;
};

class SGD : public OptimizerWithOptions<SGDOptions> {
 public:
  SGD(const std::vector<Tensor>& params, SGDOptions defaults);
  SGD(const std::vector<ParamGroup>& groups, SGDOptions defaults);

  void step() override;

 protected:
  std::vector<StateEntry> state_entries(size_t group) const override;

 private:
  bool fused_step(size_t group);
};

}  // namespace kiln::optim
