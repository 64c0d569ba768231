// Stochastic gradient descent with momentum, dampening, weight decay and
// Nesterov momentum, as torch.optim.SGD.
//
//   SGD opt(model.parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
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

namespace kiln::optim {

struct SGDOptions {
  static constexpr const char* kOptimizerName = "SGD";

  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
  // Update the parameters with one fused kernel each where their tensors
  // allow it (Note [Fused optimizer steps] in tensor/fused_optim.h); the
  // results are bitwise those of the unfused ops. Not part of state dicts.
  bool fused = true;

  static std::vector<OptionField<SGDOptions>> fields();
  // Throws naming `op` for a negative lr, momentum or weight decay, or for
  // nesterov without momentum or with dampening.
  void validate(std::string_view op) const;
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
