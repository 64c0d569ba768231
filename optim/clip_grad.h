// Gradient clipping, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_.
//
//   loss.backward();
//   double norm = clip_grad_norm_(model.parameters(), 1.0);  // the norm before clipping
//   opt.step();
//
// Parameters without a grad are skipped. The grads are changed in place.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace kiln::optim {

// Scales the grads so that their total p-norm (over all grads together, as
// one vector) is at most max_norm: each grad is multiplied by
// min(1, max_norm / (total_norm + 1e-6)). norm_type is p > 0, or infinity
// for the largest absolute value. Returns the total norm before clipping,
// 0 when no parameter has a grad. A non-finite norm scales the grads by NaN
// or 0 as PyTorch does, or throws when error_if_nonfinite.
// The norm is accumulated in float64 (PyTorch uses the grads' dtype), so
// it can differ from PyTorch's by float32 rounding.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every grad element into [-clip_value, clip_value]; clip_value >= 0.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace kiln::optim
