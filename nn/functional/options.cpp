// The overloads of nn/functional_options.h: each unpacks its builder into the
// plain form, which does the checking. The calls name functional:: so that
// kiln::softmax and its kin, found through the tensors' namespace, do not
// compete.
#include "nn/functional_options.h"

namespace kiln::nn::functional {

Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options) {
  return functional::mse_loss(input, target, options.reduction());
}

Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& options) {
  return functional::l1_loss(input, target, options.reduction());
}

Tensor pad(const Tensor& x, const PadFuncOptions& options) {
  return functional::pad(x, options.pad(), options.mode(), options.value());
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dFuncOptions& o) {
  return functional::conv2d(x, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Conv1dFuncOptions& o) {
  return functional::conv1d(x, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const ConvTranspose2dFuncOptions& o) {
  return functional::conv_transpose2d(x, weight, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(),
                                      o.dilation());
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& o) {
  return functional::batch_norm(x, running_mean, running_var, o.weight(), o.bias(), o.training(), o.momentum(),
                                o.eps());
}

Tensor layer_norm(const Tensor& x, const LayerNormFuncOptions& o) {
  return functional::layer_norm(x, o.normalized_shape(), o.weight(), o.bias(), o.eps());
}

Tensor group_norm(const Tensor& x, const GroupNormFuncOptions& o) {
  return functional::group_norm(x, o.num_groups(), o.weight(), o.bias(), o.eps());
}

Tensor instance_norm(const Tensor& x, const InstanceNormFuncOptions& o) {
  return functional::instance_norm(x, o.running_mean(), o.running_var(), o.weight(), o.bias(), o.use_input_stats(),
                                   o.momentum(), o.eps());
}

// The in-place forms take x's handle: a copy names the same tensor, which
// they write (as LibTorch's F::relu(x, ReLUFuncOptions().inplace(true))).
Tensor relu(const Tensor& x, const ReLUFuncOptions& o) {
  if (!o.inplace()) return functional::relu(x);
  Tensor written = x;
  return functional::relu_(written);
}

Tensor leaky_relu(const Tensor& x, const LeakyReLUFuncOptions& o) {
  if (!o.inplace()) return functional::leaky_relu(x, o.negative_slope());
  Tensor written = x;
  return functional::leaky_relu_(written, o.negative_slope());
}

Tensor elu(const Tensor& x, const ELUFuncOptions& o) {
  if (!o.inplace()) return functional::elu(x, o.alpha());
  Tensor written = x;
  return functional::elu_(written, o.alpha());
}

Tensor hardtanh(const Tensor& x, const HardtanhFuncOptions& o) {
  if (!o.inplace()) return functional::hardtanh(x, o.min_val(), o.max_val());
  Tensor written = x;
  return functional::hardtanh_(written, o.min_val(), o.max_val());
}

Tensor relu6(const Tensor& x, const ReLU6FuncOptions& o) {
  if (!o.inplace()) return functional::relu6(x);
  Tensor written = x;
  return functional::relu6_(written);
}

Tensor gelu(const Tensor& x, const GELUFuncOptions& o) { return functional::gelu(x, o.approximate()); }

Tensor softmax(const Tensor& x, const SoftmaxFuncOptions& o) { return functional::softmax(x, o.dim()); }

Tensor log_softmax(const Tensor& x, const LogSoftmaxFuncOptions& o) { return functional::log_softmax(x, o.dim()); }

Tensor dropout(const Tensor& x, const DropoutFuncOptions& o) {
  if (!o.inplace()) return functional::dropout(x, o.p(), o.training(), o.generator());
  Tensor written = x;
  return functional::dropout_(written, o.p(), o.training(), o.generator());
}

Tensor embedding(const Tensor& indices, const Tensor& weight, const EmbeddingFuncOptions& o) {
  return functional::embedding(indices, weight, o.padding_idx());
}

}  // namespace kiln::nn::functional
