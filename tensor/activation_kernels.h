// ActivationKernels: the activations with settings, ELU and Hardtanh, whose
// kernels take the settings beside the tensors (UnaryOp and BinaryOp have
// none), as a kernel group (Note [Kernel groups] in tensor/kernel_group.h).
// The front-ends are in tensor/activation.h; the CPU kernels in
// tensor/cpu/activation.cpp, the CUDA ones in tensor/cuda/activation.cu.
//
// Conventions as the elementwise kernels' (Note [Device dispatch] in
// tensor/backend.h): every tensor has out's shape (inputs may have stride-0
// dims) and one floating dtype; out is written through its strides and may
// be an input exactly (the in-place forms). Each value is computed in the
// dtype's compute type (float for the 16-bit floats) and rounded once.
#pragma once

#include <string_view>

#include "tensor/kernel_group.h"
#include "tensor/tensor.h"

namespace kiln {

class ActivationKernels : public KernelGroup {
 public:
  static constexpr std::string_view kName = "activation";

  // out = x <= 0 ? alpha * (e^x - 1) : x, torch's elu (NaN stays NaN).
  virtual void elu(const Tensor& out, const Tensor& x, double alpha) = 0;
  // grad_in = grad * elu'(x), from the input (from_output false):
  //   x <= 0 ? grad * alpha * e^x : grad
  // or from elu's output y (from_output true), which with alpha >= 0 is
  // <= 0 exactly where x is:
  //   y <= 0 ? grad * (y + alpha) : grad
  // as torch's elu_backward (is_result); a NaN x or y passes grad through.
  virtual void elu_backward(const Tensor& grad_in, const Tensor& grad, const Tensor& x_or_output, double alpha,
                            bool from_output) = 0;
  // grad_in = x <= min_val || x >= max_val ? 0 : grad, torch's
  // hardtanh_backward: the gradient passes strictly inside the bounds (and
  // where x is NaN). The bounds are rounded to x's dtype first, as the
  // forward's clamp rounds them, so an output equal to a bound stops the
  // gradient: x may be hardtanh's input or its output.
  virtual void hardtanh_backward(const Tensor& grad_in, const Tensor& grad, const Tensor& x, double min_val,
                                 double max_val) = 0;
};

}  // namespace kiln
