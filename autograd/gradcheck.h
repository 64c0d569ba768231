// Checking gradients by finite differences, as torch.autograd.gradcheck.
//
// gradcheck builds the full Jacobian of fn twice: analytically, one row per
// output element, by backpropagating a one-hot gradient with autograd::grad;
// and numerically, one column per input element, by central differences
// (f(x + eps) - f(x - eps)) / (2 eps). It throws kiln::Error on the first
// few entries where |analytic - numerical| > atol + rtol * |numerical|,
// naming the input, the output, both flat element indices and both values.
//
//   Tensor x = randn({3, 4}, DType::Float64).requires_grad_();
//   gradcheck([](const TensorList& in) { return TensorList{tanh(in[0])}; }, {x});
//
// Requirements: every input that requires grad is float64 (central
// differences in float32 are too coarse to tell a wrong gradient from
// rounding). Inputs that do not require grad (index tensors, masks) are
// passed through unchanged and not checked. fn must be deterministic.
// Outputs that are not floating point (indices) are ignored.
//
// The inputs are not modified: fn sees private copies with the same sizes,
// strides and storage offset as the originals, so non-contiguous inputs
// (transposed or sliced views) stay non-contiguous, and each element is
// perturbed through that layout.
#pragma once

#include <functional>

#include "autograd/node.h"

namespace kiln::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
  int max_reported = 5;  // mismatches listed in the error
};

using GradcheckFn = std::function<TensorList(const TensorList&)>;

// Throws kiln::Error when fn's analytic and numerical Jacobians differ.
void gradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& options = {});

// Checks second derivatives, as torch.autograd.gradgradcheck: gradcheck of
// (inputs, v) -> autograd::grad(fn(inputs), inputs, v, create_graph=true) for
// random float64 output gradients v (fixed seed), so the backward of every
// op on the way must itself be differentiable and correct.
void gradgradcheck(const GradcheckFn& fn, const TensorList& inputs, const GradcheckOptions& options = {});

}  // namespace kiln::autograd
