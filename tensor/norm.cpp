// Front-ends of batch norm and layer norm: validate, bring the inputs to the
// contiguous views the kernels take ((N, C, S) and (M, K) rows), do the
// per-channel arithmetic on (C)-sized tensors, dispatch once
// (Note [Device dispatch]). Dtype rules: Note [Normalization statistics] in
// tensor/norm.h.
#include "tensor/norm.h"

#include "tensor/backend.h"
#include "tensor/elementwise.h"
#include "tensor/factory.h"

namespace kiln::ops {
namespace {

// float32 for the 16-bit floats, else the dtype itself.
DType stats_dtype(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 ? DType::Float32 : dtype;
}

void check_input(const Tensor& x, const char* op) {
  KILN_CHECK(x.defined(), op, ": input is undefined");
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating point input, got ", x.dtype());
}

// A parameter-like tensor (weight, bias, running stats, saved stats) must be
// on x's device, of shape `shape`, and of x's dtype or float32 for a 16-bit x.
void check_param(const Tensor& t, const char* name, const Shape& shape, const Tensor& x, const char* op) {
  if (!t.defined()) return;
  KILN_CHECK(t.device() == x.device(), op, ": ", name, " is on ", t.device(), " but the input is on ", x.device());
  KILN_CHECK(t.shape() == shape, op, ": expected ", name, " of shape ", shape, ", got ", t.shape());
  KILN_CHECK(t.dtype() == x.dtype() || t.dtype() == stats_dtype(x.dtype()), op, ": ", name, " has dtype ",
             t.dtype(), " but the input is ", x.dtype(), " (expected ", x.dtype(),
             x.dtype() == stats_dtype(x.dtype()) ? "" : " or float32", ")");
}

void check_eps(double eps, const char* op) {
  KILN_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
}

// t (any shape) as a contiguous tensor of `dtype`.
Tensor contiguous_as(const Tensor& t, DType dtype) { return t.to(dtype).contiguous(); }

// x: (N, C, *) -> (N, C, S) contiguous.
Tensor batch_view(const Tensor& x) {
  int64_t spatial = 1;
  for (int64_t d = 2; d < x.dim(); ++d) spatial *= x.size(d);
  return x.contiguous().view({x.size(0), x.size(1), spatial});
}

void check_batch_input(const Tensor& x, const char* op) {
  check_input(x, op);
  KILN_CHECK(x.dim() >= 2, op, ": expected an input of at least 2 dims (N, C, *), got shape ", x.shape());
}

// The number of leading elements of x before normalized_shape (M), after
// checking that normalized_shape matches x's trailing dims.
int64_t check_layer_shape(const Tensor& x, const Shape& normalized_shape, const char* op) {
  KILN_CHECK(!normalized_shape.empty(), op, ": normalized_shape must have at least one dim, got []");
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool matches = x.dim() >= k;
  for (int64_t i = 0; matches && i < k; ++i) matches = x.size(x.dim() - k + i) == normalized_shape[i];
  KILN_CHECK(matches, op, ": normalized_shape ", normalized_shape, " does not match the last ", k,
             " dims of the input of shape ", x.shape());
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim() - k; ++d) rows *= x.size(d);
  return rows;
}

}  // namespace

BatchNormResult batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  check_batch_input(x, op);
  int64_t channels = x.size(1);
  check_param(weight, "weight", {channels}, x, op);
  check_param(bias, "bias", {channels}, x, op);
  check_param(running_mean, "running_mean", {channels}, x, op);
  check_param(running_var, "running_var", {channels}, x, op);
  check_eps(eps, op);
  KILN_CHECK(running_mean.defined() == running_var.defined(), op,
             ": running_mean and running_var must be given together (got only ",
             running_mean.defined() ? "running_mean" : "running_var", ")");
  KILN_CHECK(training || running_mean.defined(), op,
             ": running_mean and running_var are required when not training (training=false)");
  int64_t values_per_channel = 1;
  for (int64_t d = 0; d < x.dim(); ++d) values_per_channel *= d == 1 ? 1 : x.size(d);
  KILN_CHECK(!training || values_per_channel > 1, op,
             ": Expected more than 1 value per channel when training, got input size ", x.shape());
  Tensor xv = batch_view(x);  // (N, C, S)

  DType stat = stats_dtype(x.dtype());
  Backend& backend = backend_for(x.device());
  Tensor mean, invstd;  // (C)
  if (training) {
    mean = Tensor::empty({channels}, {stat, x.device()});
    Tensor var = Tensor::empty({channels}, {stat, x.device()});  // biased
    backend.batch_norm_stats(mean, var, xv);
    invstd = rsqrt(add(var, eps));
    if (running_mean.defined()) {
      double unbias = static_cast<double>(values_per_channel) / static_cast<double>(values_per_channel - 1);
      // The handles are copies; copy_ writes the caller's buffers in place.
      Tensor running_mean_out = running_mean, running_var_out = running_var;
      running_mean_out.copy_(add(mul(running_mean.to(stat), 1 - momentum), mean, momentum));
      running_var_out.copy_(add(mul(running_var.to(stat), 1 - momentum), var, momentum * unbias));
    }
  } else {
    mean = running_mean.to(stat).clone();
    invstd = rsqrt(add(running_var.to(stat), eps));
  }
  Tensor scale = weight.defined() ? mul(invstd, weight.to(stat)) : invstd;
  Tensor shift = bias.defined() ? contiguous_as(bias, stat) : zeros({channels}, {stat, x.device()});
  Tensor out = Tensor::empty(xv.shape(), {x.dtype(), x.device()});
  backend.batch_norm_apply(out, xv, mean, scale.contiguous(), shift);
  return {out.view(x.shape()), mean, invstd};
}

BatchNormGrads batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                   std::array<bool, 3> output_mask) {
  const char* op = "batch_norm_backward";
  check_batch_input(x, op);
  KILN_CHECK(grad_out.defined(), op, ": grad_out is undefined");
  KILN_CHECK(grad_out.shape() == x.shape() && grad_out.dtype() == x.dtype() && grad_out.device() == x.device(),
             op, ": grad_out (", grad_out.shape(), ", ", grad_out.dtype(), ", ", grad_out.device(),
             ") must match the input (", x.shape(), ", ", x.dtype(), ", ", x.device(), ")");
  int64_t channels = x.size(1);
  KILN_CHECK(save_mean.defined() && save_invstd.defined(), op, ": save_mean and save_invstd are required");
  check_param(weight, "weight", {channels}, x, op);
  check_param(save_mean, "save_mean", {channels}, x, op);
  check_param(save_invstd, "save_invstd", {channels}, x, op);

  DType stat = stats_dtype(x.dtype());
  DType param_dtype = weight.defined() ? weight.dtype() : x.dtype();
  Backend& backend = backend_for(x.device());
  Tensor xv = batch_view(x);          // (N, C, S)
  Tensor dy = batch_view(grad_out);  // (N, C, S)
  Tensor mean = contiguous_as(save_mean, stat);
  Tensor invstd = contiguous_as(save_invstd, stat);
  double values_per_channel = static_cast<double>(xv.size(0) * xv.size(2));

  BatchNormGrads grads;
  Tensor sum_dy, sum_dy_xmu;  // (C)
  if (output_mask[1] || output_mask[2] || (output_mask[0] && training)) {
    sum_dy = Tensor::empty({channels}, {stat, x.device()});
    sum_dy_xmu = Tensor::empty({channels}, {stat, x.device()});
    backend.batch_norm_backward_reduce(sum_dy, sum_dy_xmu, dy, xv, mean);
  }
  if (output_mask[1]) grads.grad_weight = mul(sum_dy_xmu, invstd).to(param_dtype);
  if (output_mask[2]) grads.grad_bias = sum_dy.to(param_dtype);
  if (output_mask[0]) {
    // dx = w * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean)))
    // in training; in eval the statistics are constants and dx = w * invstd * dy.
    Tensor dy_scale = weight.defined() ? mul(invstd, weight.to(stat)) : invstd;
    Tensor xmu_scale, shift;
    if (training) {
      xmu_scale = neg(div(mul(mul(dy_scale, mul(invstd, invstd)), sum_dy_xmu), values_per_channel));
      shift = neg(div(mul(dy_scale, sum_dy), values_per_channel));
    } else {
      xmu_scale = zeros({channels}, {stat, x.device()});
      shift = xmu_scale;
    }
    Tensor grad_input = Tensor::empty(xv.shape(), {x.dtype(), x.device()});
    backend.batch_norm_backward_apply(grad_input, dy, xv, mean, dy_scale.contiguous(), xmu_scale.contiguous(),
                                      shift.contiguous());
    grads.grad_input = grad_input.view(x.shape());
  }
  return grads;
}

LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                           double eps) {
  const char* op = "layer_norm";
  check_input(x, op);
  int64_t rows = check_layer_shape(x, normalized_shape, op);
  check_param(weight, "weight", normalized_shape, x, op);
  check_param(bias, "bias", normalized_shape, x, op);
  check_eps(eps, op);
  int64_t k = shape_numel(normalized_shape, op);
  DType stat = stats_dtype(x.dtype());
  Tensor xv = x.contiguous().view({rows, k});  // (M, K)
  Tensor w = weight.defined() ? contiguous_as(weight, stat) : ones({k}, {stat, x.device()});  // (K)
  Tensor b = bias.defined() ? contiguous_as(bias, stat) : zeros({k}, {stat, x.device()});     // (K)
  Tensor out = Tensor::empty({rows, k}, {x.dtype(), x.device()});
  Tensor mean = Tensor::empty({rows}, {stat, x.device()});
  Tensor rstd = Tensor::empty({rows}, {stat, x.device()});
  backend_for(x.device()).layer_norm(out, mean, rstd, xv, w, b, eps);
  // x.shape[:-k] + [1] * k, as torch.native_layer_norm.
  Shape stats_shape(x.shape().begin(), x.shape().end() - static_cast<int64_t>(normalized_shape.size()));
  stats_shape.resize(x.shape().size(), 1);
  return {out.view(x.shape()), mean.view(stats_shape), rstd.view(stats_shape)};
}

LayerNormGrads layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Shape& normalized_shape,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                   std::array<bool, 3> output_mask) {
  const char* op = "layer_norm_backward";
  check_input(x, op);
  int64_t rows = check_layer_shape(x, normalized_shape, op);
  KILN_CHECK(grad_out.defined(), op, ": grad_out is undefined");
  KILN_CHECK(grad_out.shape() == x.shape() && grad_out.dtype() == x.dtype() && grad_out.device() == x.device(),
             op, ": grad_out (", grad_out.shape(), ", ", grad_out.dtype(), ", ", grad_out.device(),
             ") must match the input (", x.shape(), ", ", x.dtype(), ", ", x.device(), ")");
  check_param(weight, "weight", normalized_shape, x, op);
  KILN_CHECK(mean.defined() && rstd.defined(), op, ": mean and rstd are required");
  check_param(mean, "mean", mean.shape(), x, op);
  check_param(rstd, "rstd", rstd.shape(), x, op);
  KILN_CHECK(mean.numel() == rows && rstd.numel() == rows, op, ": expected mean and rstd with ", rows,
             " values (one per normalized row), got shapes ", mean.shape(), " and ", rstd.shape());
  int64_t k = shape_numel(normalized_shape, op);
  DType stat = stats_dtype(x.dtype());
  DType param_dtype = weight.defined() ? weight.dtype() : x.dtype();
  Tensor xv = x.contiguous().view({rows, k});          // (M, K)
  Tensor dy = grad_out.contiguous().view({rows, k});  // (M, K)
  Tensor w = weight.defined() ? contiguous_as(weight, stat) : ones({k}, {stat, x.device()});  // (K)
  TensorOptions rows_options{x.dtype(), x.device()};
  TensorOptions stat_options{stat, x.device()};
  Tensor grad_input = output_mask[0] ? Tensor::empty({rows, k}, rows_options) : Tensor();
  Tensor grad_weight = output_mask[1] ? Tensor::empty({k}, stat_options) : Tensor();
  Tensor grad_bias = output_mask[2] ? Tensor::empty({k}, stat_options) : Tensor();
  if (output_mask[0] || output_mask[1] || output_mask[2]) {
    backend_for(x.device()).layer_norm_backward(grad_input, grad_weight, grad_bias, dy, xv,
                                                contiguous_as(mean, stat).view({rows}),
                                                contiguous_as(rstd, stat).view({rows}), w);
  }
  LayerNormGrads grads;
  if (output_mask[0]) grads.grad_input = grad_input.view(x.shape());
  if (output_mask[1]) grads.grad_weight = grad_weight.view(normalized_shape).to(param_dtype);
  if (output_mask[2]) grads.grad_bias = grad_bias.view(normalized_shape).to(param_dtype);
  return grads;
}

}  // namespace kiln::ops
