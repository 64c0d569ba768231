// The activations with settings, as torch's elu and hardtanh (relu6 is
// hardtanh(x, 0, 6)), and their gradients as one pass each, which autograd
// runs (nn/functional/activation.cpp). Their kernels are a kernel group
// (tensor/activation_kernels.h), except hardtanh's value, which is clamp's,
// as torch's hardtanh is a clamp.
//   Tensor y = ops::elu(x, /*alpha=*/1.0);
//   Tensor g = ops::elu_backward(grad, x, 1.0, /*from_output=*/false);
#pragma once

#include "tensor/tensor.h"

namespace kiln::ops {

// x where x > 0, alpha * (e^x - 1) elsewhere; floating x, the result in
// x's dtype. elu_ writes x and returns it.
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor& elu_(Tensor& x, double alpha = 1.0);
// grad * elu'(x) (from_output false), or the same from elu's output y,
// y <= 0 ? grad * (y + alpha) : grad (from_output true; right only for
// alpha >= 0, where y <= 0 exactly when x <= 0). grad and the other
// broadcast together and promote to one floating dtype.
Tensor elu_backward(const Tensor& grad, const Tensor& x_or_output, double alpha, bool from_output);

// x clamped to [min_val, max_val], in x's dtype: floating or integer (the
// bounds then truncated to integers, as torch), not bool; an unsigned x
// needs bounds >= 0, and min_val > max_val is refused. hardtanh_ writes x.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor& hardtanh_(Tensor& x, double min_val = -1.0, double max_val = 1.0);
// grad where min_val < x < max_val (and where x is NaN), 0 elsewhere, as
// torch's hardtanh_backward: at the bounds themselves the gradient is 0.
// x may be hardtanh's output as well as its input (the two agree on which
// side of the bounds they are). Floating tensors, broadcast together.
Tensor hardtanh_backward(const Tensor& grad, const Tensor& x, double min_val, double max_val);

}  // namespace kiln::ops
