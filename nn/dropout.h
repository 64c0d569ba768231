// Dropout, as torch.nn.Dropout: in training, zeroes each element with
// probability p and scales the rest by 1 / (1 - p); in eval, the identity.
#pragma once

#include "nn/module.h"
#include "tensor/random.h"

namespace kiln::nn {

class Dropout : public Module {
 public:
  // p in [0, 1]. The masks come from `generator`, or the default generator
  // when it is null; a generator must outlive the module.
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);

  Tensor forward(const Tensor& input) override;
  // "p=0.5, inplace=False"
  std::string extra_repr() const override;

  const double p;
  Generator* generator;
};

}  // namespace kiln::nn
