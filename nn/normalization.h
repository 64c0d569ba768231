// Normalization layers, as torch.nn.BatchNorm1d, BatchNorm2d and LayerNorm.
//
//   auto bn = std::make_shared<nn::BatchNorm2d>(16);
//   Tensor y = (*bn)(x);   // training: batch statistics, running stats updated
//   bn->eval();
//   y = (*bn)(x);          // eval: running statistics
//   nn::BatchNorm1d bn1(nn::BatchNorm1dOptions(64).momentum(0.01).affine(false));   // as LibTorch
#pragma once

#include <cstdint>
#include <optional>

#include "nn/module.h"
#include "tensor/arg.h"

namespace kiln::nn {

// torch.nn.BatchNorm1d's and BatchNorm2d's arguments (Note [Option
// builders] in tensor/arg.h); momentum std::nullopt is the cumulative average.
class BatchNormOptions {
 public:
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}

  KILN_ARG(int64_t, num_features);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(std::optional<double>, momentum) = 0.1;
  KILN_ARG(bool, affine) = true;
  KILN_ARG(bool, track_running_stats) = true;
};
using BatchNorm1dOptions = BatchNormOptions;  // LibTorch's names
using BatchNorm2dOptions = BatchNormOptions;

// What batch and instance norm share (torch's _NormBase): the settings,
// the affine parameters and the running statistics.
//
// Parameters "weight" (ones) and "bias" (zeros), (num_features), when affine.
// Buffers "running_mean" (zeros), "running_var" (ones) and
// "num_batches_tracked" (0-dim int64), when track_running_stats.
class NormBase : public Module {
 public:
  // "16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True"
  std::string extra_repr() const override;
  // running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();
  // reset_running_stats(), weight = 1, bias = 0.
  void reset_parameters();

  const int64_t num_features;
  const double eps;
  const std::optional<double> momentum;
  const bool affine;
  const bool track_running_stats;
  Tensor weight;
  Tensor bias;
  Tensor running_mean;
  Tensor running_var;
  Tensor num_batches_tracked;

 protected:
  // `family` ("BatchNorm") names the layer in the message for num_features < 1.
  NormBase(const char* family, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
           bool track_running_stats);

  // The settings and the very tensors of `source`'s parameters and buffers,
  // registered under the same names (a frozen weight stays frozen): for a
  // layer that takes another's place, such as distributed::SyncBatchNorm
  // in convert_sync_batchnorm, so that an optimizer built on the old
  // layer's parameters keeps working.
  struct TakeOver {
    const NormBase& source;
  };
  explicit NormBase(TakeOver take_over);
};

// The shared implementation of BatchNorm1d and BatchNorm2d (torch's
// _BatchNorm), which differ only in the input ranks they accept.
//
// In training, each forward normalises with the batch statistics and updates
//   running = (1 - momentum) * running + momentum * batch_statistic
// (the unbiased variance for running_var); momentum = nullopt uses the
// cumulative average, momentum 1 / num_batches_tracked. In eval, it
// normalises with the running statistics, or, without them
// (track_running_stats false), with the batch statistics as in training.
class BatchNorm : public NormBase {
 public:
  BatchNorm(int64_t num_features, double eps, std::optional<double> momentum, bool affine, bool track_running_stats)
      : NormBase("BatchNorm", num_features, eps, momentum, affine, track_running_stats) {}

  Tensor forward(const Tensor& input) override;

 protected:
  explicit BatchNorm(TakeOver take_over) : NormBase(take_over) {}

  // Throws naming the layer when the input's rank is not one it accepts.
  virtual void check_input_dim(const Tensor& input) const = 0;
  // The start of every forward: checks the input, advances
  // num_batches_tracked in training, and returns this step's running-average
  // factor (momentum, or 1 / num_batches_tracked without one), as torch's
  // _BatchNorm.forward.
  double begin_forward(const Tensor& input);
  // This process's batch norm of `input` with the factor begin_forward gave:
  // batch statistics in training (or without running ones), else running.
  Tensor normalize(const Tensor& input, double factor);
};

// Over (N, C) or (N, C, L) inputs: statistics per channel C.
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats) {}
  explicit BatchNorm1d(const BatchNormOptions& o)
      : BatchNorm1d(o.num_features(), o.eps(), o.momentum(), o.affine(), o.track_running_stats()) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// Over (N, C, H, W) inputs: statistics per channel C.
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm(num_features, eps, momentum, affine, track_running_stats) {}
  explicit BatchNorm2d(const BatchNormOptions& o)
      : BatchNorm2d(o.num_features(), o.eps(), o.momentum(), o.affine(), o.track_running_stats()) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// torch.nn.LayerNorm's arguments (Note [Option builders] in tensor/arg.h).
//   nn::LayerNorm ln(nn::LayerNormOptions({768}).eps(1e-6).bias(false));
class LayerNormOptions {
 public:
  explicit LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}

  KILN_ARG(Shape, normalized_shape);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(bool, elementwise_affine) = true;
  KILN_ARG(bool, bias) = true;
};

// Normalises over the trailing dims given by normalized_shape, with
// parameters "weight" (ones) and "bias" (zeros) of that shape when
// elementwise_affine (bias only when `bias` too).
//   auto ln = std::make_shared<nn::LayerNorm>(768);   // x: (B, T, 768)
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}
  explicit LayerNorm(const LayerNormOptions& o)
      : LayerNorm(o.normalized_shape(), o.eps(), o.elementwise_affine(), o.bias()) {}

  Tensor forward(const Tensor& input) override;
  // "(768,), eps=1e-05, elementwise_affine=True"
  std::string extra_repr() const override;
  void reset_parameters();

  const Shape normalized_shape;
  const double eps;
  const bool elementwise_affine;
  Tensor weight;
  Tensor bias;
};

}  // namespace kiln::nn
