#include "nn/group_norm.h"

#include <string>

#include "nn/functional_composite.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups(num_groups), num_channels(num_channels), eps(eps), affine(affine) {
  KILN_CHECK(num_groups > 0 && num_channels > 0, "GroupNorm: num_groups and num_channels must be positive, got ",
             num_groups, " and ", num_channels);
  KILN_CHECK(num_channels % num_groups == 0, "GroupNorm: num_channels (", num_channels,
             ") must be divisible by num_groups (", num_groups, ")");
  weight = register_parameter("weight", affine ? empty({num_channels}) : Tensor());
  bias = register_parameter("bias", affine ? empty({num_channels}) : Tensor());
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (!affine) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& input) {
  KILN_CHECK(input.dim() >= 2, "GroupNorm: expected input of shape (N, C, *), got ", input.dim(), "D input of shape ",
             input.shape());
  KILN_CHECK(input.size(1) == num_channels, "GroupNorm: expected ", num_channels,
             " channels (dim 1), got input of shape ", input.shape());
  return functional::group_norm(input, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups) + ", " + std::to_string(num_channels) + ", eps=" + repr::floating(eps) +
         ", affine=" + repr::boolean(affine);
}

}  // namespace kiln::nn
