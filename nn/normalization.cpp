#include "nn/normalization.h"

#include <string>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

NormBase::NormBase(const char* family, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                   bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats) {
  KILN_CHECK(num_features > 0, family, ": num_features must be positive, got ", num_features);
  weight = register_parameter("weight", affine ? empty({num_features}) : Tensor());
  bias = register_parameter("bias", affine ? empty({num_features}) : Tensor());
  running_mean = register_buffer("running_mean", track_running_stats ? empty({num_features}) : Tensor());
  running_var = register_buffer("running_var", track_running_stats ? empty({num_features}) : Tensor());
  num_batches_tracked =
      register_buffer("num_batches_tracked", track_running_stats ? zeros({}, DType::Int64) : Tensor());
  reset_parameters();
}

NormBase::NormBase(TakeOver take_over)
    : num_features(take_over.source.num_features),
      eps(take_over.source.eps),
      momentum(take_over.source.momentum),
      affine(take_over.source.affine),
      track_running_stats(take_over.source.track_running_stats) {
  const NormBase& source = take_over.source;
  const bool trained = !source.weight.defined() || source.weight.requires_grad();
  weight = register_parameter("weight", source.weight, trained);
  bias = register_parameter("bias", source.bias, trained);
  running_mean = register_buffer("running_mean", source.running_mean);
  running_var = register_buffer("running_var", source.running_var);
  num_batches_tracked = register_buffer("num_batches_tracked", source.num_batches_tracked);
  train(source.is_training());
}

void NormBase::reset_running_stats() {
  if (!track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void NormBase::reset_parameters() {
  reset_running_stats();
  if (affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

std::string NormBase::extra_repr() const {
  return std::to_string(num_features) + ", eps=" + repr::floating(eps) +
         ", momentum=" + (momentum ? repr::floating(*momentum) : std::string("None")) +
         ", affine=" + repr::boolean(affine) + ", track_running_stats=" + repr::boolean(track_running_stats);
}

double BatchNorm::begin_forward(const Tensor& input) {
  check_input_dim(input);
  KILN_CHECK(input.size(1) == num_features, name(), ": expected ", num_features,
             " channels (dim 1), got input of shape ", input.shape());
  // As torch's _BatchNorm.forward: the step counter advances in training,
  // and without a momentum drives the cumulative average.
  double factor = momentum.value_or(0.0);
  if (is_training() && track_running_stats) {
    ops::add_(num_batches_tracked, 1);
    if (!momentum) factor = 1.0 / num_batches_tracked.item<double>();
  }
  return factor;
}

Tensor BatchNorm::forward(const Tensor& input) { return normalize(input, begin_forward(input)); }

Tensor BatchNorm::normalize(const Tensor& input, double factor) {
  // Eval uses the running statistics when there are any.
  const bool use_batch_stats = is_training() || !running_mean.defined();
  return functional::batch_norm(input, running_mean, running_var, weight, bias, use_batch_stats, factor, eps);
}

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, "BatchNorm1d: expected 2D or 3D input (N, C) or (N, C, L), got ",
             input.dim(), "D input of shape ", input.shape());
}

void BatchNorm2d::check_input_dim(const Tensor& input) const {
  KILN_CHECK(input.dim() == 4, "BatchNorm2d: expected 4D input (N, C, H, W), got ", input.dim(), "D input of shape ",
             input.shape());
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape(std::move(normalized_shape)), eps(eps), elementwise_affine(elementwise_affine) {
  KILN_CHECK(!this->normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t size : this->normalized_shape) {
    KILN_CHECK(size > 0, "LayerNorm: normalized_shape must hold positive sizes, got ", this->normalized_shape);
  }
  weight = register_parameter("weight", elementwise_affine ? empty(this->normalized_shape) : Tensor());
  this->bias = register_parameter("bias", elementwise_affine && bias ? empty(this->normalized_shape) : Tensor());
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& input) {
  return functional::layer_norm(input, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  return repr::tuple(normalized_shape) + ", eps=" + repr::floating(eps) +
         ", elementwise_affine=" + repr::boolean(elementwise_affine);
}

}  // namespace kiln::nn
