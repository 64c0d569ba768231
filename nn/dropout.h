// Dropout, as torch.nn.Dropout: in training, zeroes each element with
// probability p and scales the rest by 1 / (1 - p); in eval, the identity.
//   auto drop = std::make_shared<nn::Dropout>(0.2);
//   nn::Dropout same(nn::DropoutOptions(0.2));   // as LibTorch
//   nn::Dropout in_place(nn::DropoutOptions(0.2).inplace(true));   // writes the input (F::dropout_)
#pragma once

#include "nn/module.h"
#include "tensor/arg.h"
#include "tensor/random.h"

namespace kiln::nn {

// torch.nn.Dropout's arguments, and the generator of the masks (Note
// [Option builders] in tensor/arg.h).
class DropoutOptions {
 public:
  explicit DropoutOptions(double p = 0.5) : p_(p) {}

  KILN_ARG(double, p);
  KILN_ARG(Generator*, generator) = nullptr;
  // Multiply the mask into the input and return it (Note [Recorded in-place
  // ops] in autograd/function.h).
  KILN_ARG(bool, inplace) = false;
};

class Dropout : public Module {
 public:
  // p in [0, 1]. The masks come from `generator`, or the default generator
  // when it is null; a generator must outlive the module.
  explicit Dropout(double p = 0.5, Generator* generator = nullptr, bool inplace = false);
  explicit Dropout(const DropoutOptions& o) : Dropout(o.p(), o.generator(), o.inplace()) {}

  Tensor forward(const Tensor& input) override;
  // "p=0.5, inplace=False"
  std::string extra_repr() const override;

  const double p;
  Generator* generator;
  const bool inplace;
};

}  // namespace kiln::nn
