// Gradient clipping by total norm and by value.
#include "optim/clip_grad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace kiln::optim {

namespace {

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}

// max |g| over all grads; NaN if any element is NaN, as torch.max.
double inf_norm(const std::vector<Tensor>& grads) {
  double total = 0.0;
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    double m = ops::amax(ops::abs(g)).item<double>();
    if (std::isnan(m) || m > total) total = m;
    if (std::isnan(total)) break;
  }
  return total;
}

// (sum over all grads of sum |g|^p)^(1/p), accumulated in float64.
double p_norm(const std::vector<Tensor>& grads, double p) {
  double sum = 0.0;
  for (const Tensor& g : grads) {
    Tensor g64 = g.to(DType::Float64);
    Tensor powered = p == 2.0 ? ops::mul(g64, g64) : p == 1.0 ? ops::abs(g64) : ops::pow(ops::abs(g64), p);
    sum += ops::sum(powered).item<double>();
  }
  return std::pow(sum, 1.0 / p);
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  KILN_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be positive or infinity, got ", norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads = defined_grads(params);
  if (grads.empty()) return 0.0;
  const double total_norm = std::isinf(norm_type) ? inf_norm(grads) : p_norm(grads, norm_type);
  KILN_CHECK(!error_if_nonfinite || std::isfinite(total_norm), "clip_grad_norm_: the total norm of order ", norm_type,
             " of the gradients is ", total_norm,
             ", so it cannot be clipped; pass error_if_nonfinite = false to scale the gradients by it anyway");
  // NaN stays NaN through std::min (its comparison is false), so a NaN norm
  // makes every grad NaN, as in PyTorch.
  const double clip_coef = std::min(max_norm / (total_norm + 1e-6), 1.0);
  if (clip_coef != 1.0) {
    for (Tensor& g : grads) ops::mul_(g, clip_coef);
  }
  return total_norm;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (Tensor& g : defined_grads(params)) ops::clamp_(g, -clip_value, clip_value);
}

}  // namespace kiln::optim
