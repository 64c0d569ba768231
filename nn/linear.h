// Linear (torch.nn.Linear) and Identity.
//
//   auto fc = std::make_shared<nn::Linear>(400, 120);
//   Tensor y = (*fc)(x);   // x: (*, 400) -> (*, 120)
//   nn::Linear head(nn::LinearOptions(120, 10).bias(false));   // as LibTorch
#pragma once

#include <cstdint>

#include "nn/module.h"
#include "tensor/arg.h"

namespace kiln::nn {

// torch.nn.Linear's arguments (Note [Option builders] in tensor/arg.h).
class LinearOptions {
 public:
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}

  KILN_ARG(int64_t, in_features);
  KILN_ARG(int64_t, out_features);
  KILN_ARG(bool, bias) = true;
};

// y = x @ weight^T + bias. Parameters "weight" (out_features, in_features)
// and "bias" (out_features), absent when bias is false, initialised as
// torch's reset_parameters: both ~ U(-1/sqrt(in_features), 1/sqrt(in_features))
// (kaiming_uniform_ with a = sqrt(5) for the weight).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  explicit Linear(const LinearOptions& options)
      : Linear(options.in_features(), options.out_features(), options.bias()) {}

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
