#include "nn/instance_norm.h"

#include "nn/functional_composite.h"

namespace kiln::nn {

InstanceNorm::InstanceNorm(int64_t spatial_dims, const InstanceNormOptions& o)
    : NormBase("InstanceNorm", o.num_features(), o.eps(), o.momentum(), o.affine(), o.track_running_stats()),
      spatial_dims_(spatial_dims) {}

Tensor InstanceNorm::forward(const Tensor& input) {
  const int64_t batched = spatial_dims_ + 2;
  KILN_CHECK(input.dim() == batched || input.dim() == batched - 1, name(), ": expected ", batched - 1, "D or ",
             batched, "D input, got ", input.dim(), "D input of shape ", input.shape());
  // Unbatched: a batch of one, as torch's _handle_no_batch_input.
  if (input.dim() == batched - 1) return forward(input.unsqueeze(0)).squeeze(0);
  KILN_CHECK(input.size(1) == num_features, name(), ": expected ", num_features,
             " channels (dim 1), got input of shape ", input.shape());
  const bool use_input_stats = is_training() || !track_running_stats;
  return functional::instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                                   momentum.value_or(0.0), eps);
}

}  // namespace kiln::nn
