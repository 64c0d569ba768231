// GroupNorm, as torch.nn.GroupNorm: a composite of layer_norm (Note
// [Composite layers] in nn/functional_composite.h).
//
//   auto gn = std::make_shared<nn::GroupNorm>(/*num_groups=*/4, /*num_channels=*/16);
//   Tensor y = (*gn)(x);   // x: (N, 16, *), statistics per sample and group of 4 channels
//   nn::GroupNorm gn2(nn::GroupNormOptions(4, 16).eps(1e-6).affine(false));   // as LibTorch
#pragma once

#include <cstdint>

#include "nn/module.h"
#include "tensor/arg.h"

namespace kiln::nn {

// torch.nn.GroupNorm's arguments (Note [Option builders] in tensor/arg.h).
class GroupNormOptions {
 public:
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}

  KILN_ARG(int64_t, num_groups);
  KILN_ARG(int64_t, num_channels);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(bool, affine) = true;
};

// Normalises each sample's channels in num_groups groups, by the mean and
// biased variance of each group over its channels and positions, the same
// in training and eval. Parameters "weight" (ones) and "bias" (zeros),
// (num_channels), when affine. num_channels must be divisible by num_groups.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  explicit GroupNorm(const GroupNormOptions& o) : GroupNorm(o.num_groups(), o.num_channels(), o.eps(), o.affine()) {}

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
