#include "nn/instance_norm.h"

#include <string>

#include "nn/functional_composite.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

InstanceNorm::InstanceNorm(int64_t spatial_dims, int64_t num_features, double eps, double momentum, bool affine,
                           bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats),
      spatial_dims_(spatial_dims) {
  KILN_CHECK(num_features > 0, "InstanceNorm: num_features must be positive, got ", num_features);
  weight = register_parameter("weight", affine ? empty({num_features}) : Tensor());
  bias = register_parameter("bias", affine ? empty({num_features}) : Tensor());
  running_mean = register_buffer("running_mean", track_running_stats ? empty({num_features}) : Tensor());
  running_var = register_buffer("running_var", track_running_stats ? empty({num_features}) : Tensor());
  num_batches_tracked =
      register_buffer("num_batches_tracked", track_running_stats ? zeros({}, DType::Int64) : Tensor());
  reset_parameters();
}

void InstanceNorm::reset_running_stats() {
  if (!track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void InstanceNorm::reset_parameters() {
  reset_running_stats();
  if (affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor InstanceNorm::forward(const Tensor& input) {
  const int64_t batched = spatial_dims_ + 2;
  KILN_CHECK(input.dim() == batched || input.dim() == batched - 1, name(), ": expected ", batched - 1, "D or ",
             batched, "D input, got ", input.dim(), "D input of shape ", input.shape());
  // Unbatched: a batch of one, as torch's _handle_no_batch_input.
  if (input.dim() == batched - 1) return forward(input.unsqueeze(0)).squeeze(0);
  KILN_CHECK(input.size(1) == num_features, name(), ": expected ", num_features,
             " channels (dim 1), got input of shape ", input.shape());
  const bool use_input_stats = is_training() || !track_running_stats;
  return functional::instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps);
}

std::string InstanceNorm::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + repr::floating(eps) + ", momentum=" + repr::floating(momentum) +
         ", affine=" + repr::boolean(affine) + ", track_running_stats=" + repr::boolean(track_running_stats);
}

}  // namespace kiln::nn
