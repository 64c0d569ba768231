// GroupNorm, as torch.nn.GroupNorm: a composite of layer_norm (Note
// [Composite layers] in nn/functional_composite.h).
//
//   auto gn = std::make_shared<nn::GroupNorm>(/*num_groups=*/4, /*num_channels=*/16);
//   Tensor y = (*gn)(x);   // x: (N, 16, *), statistics per sample and group of 4 channels
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace kiln::nn {

// Normalises each sample's channels in num_groups groups, by the mean and
// biased variance of each group over its channels and positions, the same
// in training and eval. Parameters "weight" (ones) and "bias" (zeros),
// (num_channels), when affine. num_channels must be divisible by num_groups.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);

  // input (N, num_channels, *).
  Tensor forward(const Tensor& input) override;
  // "4, 16, eps=1e-05, affine=True"
  std::string extra_repr() const override;
  // weight = 1, bias = 0.
  void reset_parameters();

  const int64_t num_groups;
  const int64_t num_channels;
  const double eps;
  const bool affine;
  Tensor weight;
  Tensor bias;
};

}  // namespace kiln::nn
