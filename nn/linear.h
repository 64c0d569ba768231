// Linear (torch.nn.Linear) and Identity.
//
//   auto fc = std::make_shared<nn::Linear>(400, 120);
//   Tensor y = (*fc)(x);   // x: (*, 400) -> (*, 120)
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace kiln::nn {

// y = x @ weight^T + bias. Parameters "weight" (out_features, in_features)
// and "bias" (out_features), absent when bias is false, initialised as
// torch's reset_parameters: both ~ U(-1/sqrt(in_features), 1/sqrt(in_features))
// (kaiming_uniform_ with a = sqrt(5) for the weight).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  Tensor forward(const Tensor& input) override;
  // "in_features=400, out_features=120, bias=True"
  std::string extra_repr() const override;
  // Draws weight and bias afresh (from the default generator).
  void reset_parameters();

  const int64_t in_features;
  const int64_t out_features;
  Tensor weight;
  Tensor bias;
};

// Returns its input (the tensor itself): a placeholder where a layer is
// optional, as torch.nn.Identity.
class Identity : public Module {
 public:
  Tensor forward(const Tensor& input) override { return input; }
};

}  // namespace kiln::nn
