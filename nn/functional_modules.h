// Modules for operations that are usually written as functions, so that a
// model can name each use of them: a residual `a + b` becomes a submodule
// ("layer1.0.add") that hooks observe and that quantization can replace with
// a quantized add carrying its own output scale, as PyTorch's
// torch.ao.nn.quantized.FloatFunctional and its swap to QFunctional.
//
//   auto add = std::make_shared<nn::Add>();
//   Tensor y = (*add)(out, identity);         // runs hooks, as (*add)({out, identity})[0]
#pragma once

#include "nn/module.h"

namespace kiln::nn {

// a + b, broadcasting as kiln::add. Takes exactly two tensors
// (Note [Modules of several tensors]) and returns one.
class Add : public Module {
 public:
  using Module::operator();
  // (*add)(a, b): the call with hooks on the pair {a, b}, unwrapped.
  Tensor operator()(const Tensor& a, const Tensor& b);

  // {a, b} -> {a + b}; throws naming the module when not given two tensors.
  TensorList forward_many(const TensorList& inputs) override;
};

}  // namespace kiln::nn
