// Fusing Conv2d + BatchNorm2d (+ ReLU), Conv2d + ReLU, Linear + ReLU and
// nn::Add + ReLU into one module before quantization, as
// torch.ao.quantization.fuse_modules and fuse_modules_qat (and, for the add,
// torch's FloatFunctional.add_relu, which eager-mode ResNets call).
//
// A fused layer is quantized as one op: its int8 kernel applies the bias,
// the ReLU and the requantization in the GEMM's output stage, so the
// activation between conv and ReLU is never rounded to int8 (that would cost
// accuracy and time), and a BatchNorm after a conv disappears into the conv's
// weight and bias (an add followed by a ReLU is likewise one int8 add that
// clamps at its output's zero point, and its output is observed after the
// ReLU, so the grid spends no codes on negative values):
//   w' = w * gamma / sqrt(var + eps)            (per output channel)
//   b' = (b - mean) * gamma / sqrt(var + eps) + beta
//
//   model->eval();
//   quant::fuse_modules(*model, {{"conv1", "bn1", "relu"}, {"fc1", "relu1"}});
//
// Each group names modules by their dotted path from `root`, in the order the
// forward runs them. The first becomes the fused module, the others
// nn::Identity, so a forward that calls them in turn computes the fused layer
// once. Eval fusion (fuse_modules) folds the BatchNorm now, from its running
// statistics; QAT fusion (fuse_modules_qat, model in training mode) keeps it,
// for prepare_qat to fold while training (quant/fake_quant_modules.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/conv.h"
#include "nn/linear.h"
#include "nn/normalization.h"

namespace kiln::quant {

// Throws, naming `op` and the module `name`, unless F::conv2d with the
// conv's params alone is the layer (nn::Conv2d::padded_by_params): fusion
// and the int8 convolutions rebuild it from them and pad each side evenly
// with the input's zero point, so a padding_mode other than zeros or an
// uneven padding='same' would silently change what the layer computes.
void check_padded_by_params(std::string_view op, std::string_view name, const nn::Conv2d& conv);

// Conv2d, optionally followed by BatchNorm2d (QAT fusion only) and ReLU.
// Children: "0" the conv, then "1" the BatchNorm when there is one, then the
// ReLU (as torch's intrinsic ConvBnReLU2d, so state-dict keys are
// "conv1.0.weight", "conv1.1.running_mean", ...).
class ConvBnReLU2d : public nn::Module {
 public:
  ConvBnReLU2d(std::shared_ptr<nn::Conv2d> conv, std::shared_ptr<nn::BatchNorm2d> bn, bool relu);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;  // null after eval fusion
  const bool relu;
};

// Linear followed by ReLU. Children "0" (the Linear) and "1" (the ReLU).
class LinearReLU : public nn::Module {
 public:
  explicit LinearReLU(std::shared_ptr<nn::Linear> linear);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Linear> linear;
};

// nn::Add followed by ReLU: {a, b} -> {relu(a + b)}. No children (neither
// holds state).
class AddReLU : public nn::Module {
 public:
  nn::TensorList forward_many(const nn::TensorList& inputs) override;
};

// A conv's weight and bias with the BatchNorm that follows it folded in (the
// formulas above), computed with differentiable ops so that QAT trains
// through it. bias may be undefined (read as zeros).
std::pair<Tensor, Tensor> fold_batch_norm(const Tensor& weight, const Tensor& bias, const nn::BatchNorm2d& bn);

// The fusions, in place. Throws kiln::Error naming the group for a path that
// does not exist, a sequence that is not one of the patterns above, a
// BatchNorm whose channels differ from the conv's, and (fuse_modules) a model
// in training mode or (fuse_modules_qat) one in eval mode.
void fuse_modules(nn::Module& root, const std::vector<std::vector<std::string>>& groups);
void fuse_modules_qat(nn::Module& root, const std::vector<std::vector<std::string>>& groups);

}  // namespace kiln::quant
