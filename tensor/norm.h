// Batch norm and layer norm, forward and backward, with torch's semantics
// (torch.native_batch_norm / native_layer_norm and their backwards).
//
// These are the raw, gradient-free kernels: autograd/ wraps each forward with
// its backward, and nn::BatchNorm1d/2d and nn::LayerNorm call them.
//
// Note [Normalization statistics]
// - Dtypes: inputs may be float16, bfloat16, float32 or float64. Statistics
//   (save_mean, save_invstd, mean, rstd) have the "stats dtype": float32 for
//   a 16-bit input, the input's dtype otherwise. Kernels compute in float32
//   (float64 for float64) and accumulate every sum in float64 blocks, so the
//   variance of data with a large mean (1e4 +- 1) keeps its digits.
// - Parameters (weight, bias, running stats) have the input's dtype, or
//   float32 for a 16-bit input (mixed precision); parameter gradients have
//   the weight's dtype (the input's when there is no weight).
// - The variance is computed in two passes (shifted by a first estimate of
//   the mean, then by the mean itself), never as E[x^2] - E[x]^2, which
//   cancels catastrophically when the mean is large against the spread.
// - Non-contiguous inputs are accepted (copied to contiguous once); outputs
//   are contiguous.
#pragma once

#include <array>

#include "tensor/tensor.h"

namespace kiln::ops {

struct BatchNormResult {
  Tensor output;       // x's shape and dtype
  Tensor save_mean;    // (C), stats dtype
  Tensor save_invstd;  // (C), stats dtype: 1 / sqrt(var + eps)
};

// x: (N, C, *). weight, bias, running_mean, running_var: (C), each optional
// (an undefined Tensor): without weight/bias the affine step is skipped.
// Training (training=true): normalises with the biased batch variance over N
// and the trailing dims; running stats, when given, are updated in place:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)
// (the unbiased variance, M = values per channel), as torch. Needs M > 1.
// Eval (training=false): normalises with the running stats, which are then
// required; save_mean/save_invstd are running_mean and 1/sqrt(running_var + eps).
//   auto r = ops::batch_norm(x, gamma, beta, rm, rv, /*training=*/true, 0.1, 1e-5);
BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps);

struct BatchNormGrads {
  Tensor grad_input;   // x's shape and dtype, when output_mask[0]
  Tensor grad_weight;  // (C), when output_mask[1]
  Tensor grad_bias;    // (C), when output_mask[2]
};

// The gradients of batch_norm given save_mean/save_invstd from its forward
// and the same `training` flag (in eval mode the statistics are constants).
// Gradients not asked for in output_mask = {input, weight, bias} are left
// undefined. grad_weight is computed even without a weight (as if it were 1).
BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                   std::array<bool, 3> output_mask);

struct LayerNormResult {
  Tensor output;  // x's shape and dtype
  // x.shape[:-k] followed by k ones (k = normalized_shape.size()), stats
  // dtype, as torch.native_layer_norm: they broadcast against x.
  Tensor mean;
  Tensor rstd;  // 1 / sqrt(var + eps), biased variance
};

// Normalises over the trailing dims given by normalized_shape, which must
// equal x's last normalized_shape.size() sizes. weight, bias: normalized_shape,
// each optional.
//   auto r = ops::layer_norm(x, {768}, gamma, beta, 1e-5);  // x: (B, T, 768)
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                           double eps);

struct LayerNormGrads {
  Tensor grad_input;   // x's shape and dtype, when output_mask[0]
  Tensor grad_weight;  // normalized_shape, when output_mask[1]
  Tensor grad_bias;    // normalized_shape, when output_mask[2]
};

// The gradients of layer_norm given its mean and rstd (either keepdim shape
// or x.shape[:-k]). Gradients not asked for in output_mask are undefined.
LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                   std::array<bool, 3> output_mask);

}  // namespace kiln::ops
