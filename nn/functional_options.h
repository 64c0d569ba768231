// LibTorch's option builders for the functional ops and the losses (Note
// [Option builders] in tensor/arg.h), beside the plain forms, which stay:
//
//   namespace F = kiln::nn::functional;
//   Tensor p = F::pad(x, F::PadFuncOptions({1, 1, 2, 0}).mode(F::PadMode::Reflect));
//   Tensor u = F::interpolate(x, F::InterpolateFuncOptions().size({8, 8}).mode(F::InterpolateMode::Bilinear));
//   Tensor y = F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(2).padding(1));
//   nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1).ignore_index(0));
//   Tensor l = F::mse_loss(y, t, F::MSELossFuncOptions().reduction(F::Reduction::Sum));
//
// A builder whose function already takes a settings struct converts to it
// (InterpolateFuncOptions to InterpolateOptions, CrossEntropyLossOptions to
// CrossEntropyOptions), as the pooling builders of nn/pooling.h do, so the
// function needs no second form and the designated-initializer calls
// (F::cross_entropy(x, y, {.label_smoothing = 0.1})) keep working. A
// function of positional arguments gets an overload taking its builder.
// Where LibTorch names one class for a loss's module and function
// (CrossEntropyLossOptions is CrossEntropyFuncOptions), so does Kiln. The
// modes are Kiln's enums (F::PadMode::Reflect), which LibTorch's constants
// convert to (kiln::kReflect, nn/constants.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "nn/activation.h"
#include "nn/functional.h"
#include "nn/functional_composite.h"
#include "nn/pooling.h"
#include "tensor/arg.h"

namespace kiln::nn {

// ---- losses: nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().label_smoothing(0.1)) ----

// torch.nn.CrossEntropyLoss's arguments; what F::cross_entropy takes too.
class CrossEntropyLossOptions {
 public:
  operator functional::CrossEntropyOptions() const {  // NOLINT: implicit, so that the loss and F:: take it
    return {
        .weight = weight_, .ignore_index = ignore_index_, .reduction = reduction_, .label_smoothing = label_smoothing_};
  }
  KILN_ARG(Tensor, weight);  // (C) or undefined
  KILN_ARG(int64_t, ignore_index) = -100;
  KILN_ARG(functional::Reduction, reduction) = functional::Reduction::Mean;
  KILN_ARG(double, label_smoothing) = 0.0;
};

// torch.nn.NLLLoss's arguments.
class NLLLossOptions {
 public:
  operator functional::NLLLossOptions() const {  // NOLINT: implicit, as CrossEntropyLossOptions'
    return {.weight = weight_, .ignore_index = ignore_index_, .reduction = reduction_};
  }
  KILN_ARG(Tensor, weight);  // (C) or undefined
  KILN_ARG(int64_t, ignore_index) = -100;
  KILN_ARG(functional::Reduction, reduction) = functional::Reduction::Mean;
};

// torch.nn.BCEWithLogitsLoss's arguments.
class BCEWithLogitsLossOptions {
 public:
  operator functional::BCEWithLogitsOptions() const {  // NOLINT: implicit, as CrossEntropyLossOptions'
    return {.weight = weight_, .pos_weight = pos_weight_, .reduction = reduction_};
  }
  KILN_ARG(Tensor, weight);
  KILN_ARG(functional::Reduction, reduction) = functional::Reduction::Mean;
  KILN_ARG(Tensor, pos_weight);
};

// torch.nn.MSELoss's and L1Loss's one argument; MSELossOptions(Reduction::Sum)
// is LibTorch's short form.
class MSELossOptions {
 public:
  MSELossOptions() = default;
  MSELossOptions(functional::Reduction reduction) : reduction_(reduction) {}  // NOLINT: implicit, as LibTorch's
  KILN_ARG(functional::Reduction, reduction) = functional::Reduction::Mean;
};
class L1LossOptions {
 public:
  L1LossOptions() = default;
  L1LossOptions(functional::Reduction reduction) : reduction_(reduction) {}  // NOLINT: implicit, as LibTorch's
  KILN_ARG(functional::Reduction, reduction) = functional::Reduction::Mean;
};

}  // namespace kiln::nn

namespace kiln::nn::functional {

using CrossEntropyFuncOptions = nn::CrossEntropyLossOptions;
using NLLLossFuncOptions = nn::NLLLossOptions;
using BinaryCrossEntropyWithLogitsFuncOptions = nn::BCEWithLogitsLossOptions;
using MSELossFuncOptions = nn::MSELossOptions;
using L1LossFuncOptions = nn::L1LossOptions;
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options);
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& options);

// ---- padding and interpolation ----

// torch.nn.functional.pad's arguments: the (before, after) pairs, last dim
// first, a mode, and the fill value of constant padding (0 when not given;
// the other modes take none).
class PadFuncOptions {
 public:
  explicit PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}
  KILN_ARG(std::vector<int64_t>, pad);
  KILN_ARG(PadMode, mode) = PadMode::Constant;
  KILN_ARG(std::optional<double>, value);
};
Tensor pad(const Tensor& x, const PadFuncOptions& options);

// torch.nn.functional.interpolate's arguments, as InterpolateOptions: give
// size or scale_factor, one entry per spatial dim or one for all.
class InterpolateFuncOptions {
 public:
  operator InterpolateOptions() const {  // NOLINT: implicit, so that F::interpolate and nn::Upsample take it
    return {.size = size_,
            .scale_factor = scale_factor_,
            .mode = mode_,
            .align_corners = align_corners_,
            .recompute_scale_factor = recompute_scale_factor_,
            .antialias = antialias_};
  }
  KILN_ARG(std::vector<int64_t>, size);
  KILN_ARG(std::vector<double>, scale_factor);
  KILN_ARG(InterpolateMode, mode) = InterpolateMode::Nearest;
  KILN_ARG(std::optional<bool>, align_corners);
  KILN_ARG(std::optional<bool>, recompute_scale_factor);
  KILN_ARG(bool, antialias) = false;  // bilinear and bicubic only
};

// ---- convolution: the bias is one of the options, as LibTorch's ----

// The padding may be kiln::kSame or kiln::kValid, as torch's padding='same'.
class Conv2dFuncOptions {
 public:
  KILN_ARG(Tensor, bias);  // (OC) or undefined
  KILN_ARG(Size2d, stride) = 1;
  KILN_ARG(Conv2dPadding, padding) = 0;
  KILN_ARG(Size2d, dilation) = 1;
  KILN_ARG(int64_t, groups) = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dFuncOptions& options);

class Conv1dFuncOptions {
 public:
  KILN_ARG(Tensor, bias);  // (OC) or undefined
  KILN_ARG(int64_t, stride) = 1;
  KILN_ARG(Conv1dPadding, padding) = 0;
  KILN_ARG(int64_t, dilation) = 1;
  KILN_ARG(int64_t, groups) = 1;
};
Tensor conv1d(const Tensor& x, const Tensor& weight, const Conv1dFuncOptions& options);

class ConvTranspose2dFuncOptions {
 public:
  KILN_ARG(Tensor, bias);  // (C_out) or undefined
  KILN_ARG(Size2d, stride) = 1;
  KILN_ARG(Size2d, padding) = 0;
  KILN_ARG(Size2d, output_padding) = 0;
  KILN_ARG(int64_t, groups) = 1;
  KILN_ARG(Size2d, dilation) = 1;
};
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const ConvTranspose2dFuncOptions& options);

// ---- pooling: the layers' builders, which convert to the kernels' settings ----

using MaxPool2dFuncOptions = nn::MaxPool2dOptions;
using AvgPool2dFuncOptions = nn::AvgPool2dOptions;

// ---- normalization ----

class BatchNormFuncOptions {
 public:
  KILN_ARG(Tensor, weight);
  KILN_ARG(Tensor, bias);
  KILN_ARG(bool, training) = false;
  KILN_ARG(double, momentum) = 0.1;
  KILN_ARG(double, eps) = 1e-5;
};
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& options);

class LayerNormFuncOptions {
 public:
  explicit LayerNormFuncOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  KILN_ARG(Shape, normalized_shape);
  KILN_ARG(Tensor, weight);
  KILN_ARG(Tensor, bias);
  KILN_ARG(double, eps) = 1e-5;
};
Tensor layer_norm(const Tensor& x, const LayerNormFuncOptions& options);

class GroupNormFuncOptions {
 public:
  explicit GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}
  KILN_ARG(int64_t, num_groups);
  KILN_ARG(Tensor, weight);
  KILN_ARG(Tensor, bias);
  KILN_ARG(double, eps) = 1e-5;
};
Tensor group_norm(const Tensor& x, const GroupNormFuncOptions& options);

class InstanceNormFuncOptions {
 public:
  KILN_ARG(Tensor, running_mean);
  KILN_ARG(Tensor, running_var);
  KILN_ARG(Tensor, weight);
  KILN_ARG(Tensor, bias);
  KILN_ARG(bool, use_input_stats) = true;
  KILN_ARG(double, momentum) = 0.1;
  KILN_ARG(double, eps) = 1e-5;
};
Tensor instance_norm(const Tensor& x, const InstanceNormFuncOptions& options);

// ---- activations, dropout, embedding ----

// inplace writes x and returns it (F::relu_, F::leaky_relu_, F::elu_,
// F::hardtanh_, F::relu6_).
using ReLUFuncOptions = nn::ReLUOptions;
using LeakyReLUFuncOptions = nn::LeakyReLUOptions;
using ELUFuncOptions = nn::ELUOptions;
using HardtanhFuncOptions = nn::HardtanhOptions;
using ReLU6FuncOptions = nn::ReLU6Options;
Tensor relu(const Tensor& x, const ReLUFuncOptions& options);
Tensor leaky_relu(const Tensor& x, const LeakyReLUFuncOptions& options);
Tensor elu(const Tensor& x, const ELUFuncOptions& options);
Tensor hardtanh(const Tensor& x, const HardtanhFuncOptions& options);
Tensor relu6(const Tensor& x, const ReLU6FuncOptions& options);

class GELUFuncOptions {
 public:
  KILN_ARG(GeluApproximation, approximate) = GeluApproximation::None;
};
Tensor gelu(const Tensor& x, const GELUFuncOptions& options);

class SoftmaxFuncOptions {
 public:
  explicit SoftmaxFuncOptions(int64_t dim) : dim_(dim) {}
  KILN_ARG(int64_t, dim);
};
using LogSoftmaxFuncOptions = SoftmaxFuncOptions;
Tensor softmax(const Tensor& x, const SoftmaxFuncOptions& options);
Tensor log_softmax(const Tensor& x, const LogSoftmaxFuncOptions& options);

class DropoutFuncOptions {
 public:
  KILN_ARG(double, p) = 0.5;
  KILN_ARG(bool, training) = true;
  KILN_ARG(bool, inplace) = false;            // write x and return it (F::dropout_)
  KILN_ARG(Generator*, generator) = nullptr;  // the default generator when null
};
Tensor dropout(const Tensor& x, const DropoutFuncOptions& options);

class EmbeddingFuncOptions {
 public:
  KILN_ARG(std::optional<int64_t>, padding_idx);
};
Tensor embedding(const Tensor& indices, const Tensor& weight, const EmbeddingFuncOptions& options);

}  // namespace kiln::nn::functional
