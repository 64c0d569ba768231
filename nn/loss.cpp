#include "nn/loss.h"

namespace kiln::nn {

CrossEntropyLoss::CrossEntropyLoss(functional::CrossEntropyOptions options) : options(std::move(options)) {
  this->options.weight = register_buffer("weight", this->options.weight);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::cross_entropy(input, target, options);
}

NLLLoss::NLLLoss(functional::NLLLossOptions options) : options(std::move(options)) {
  this->options.weight = register_buffer("weight", this->options.weight);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::nll_loss(input, target, options);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return functional::mse_loss(input, target, reduction);
}

Tensor L1Loss::forward(const Tensor& input, const Tensor& target) {
  return functional::l1_loss(input, target, reduction);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(functional::BCEWithLogitsOptions options) : options(std::move(options)) {
  this->options.weight = register_buffer("weight", this->options.weight);
  this->options.pos_weight = register_buffer("pos_weight", this->options.pos_weight);
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy_with_logits(input, target, options);
}

}  // namespace kiln::nn
