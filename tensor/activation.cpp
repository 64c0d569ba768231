// Front-ends of elu and hardtanh and their gradients: checks, the result's
// dtype and shape, and one device decision each (Note [Device dispatch]).
#include "tensor/activation.h"

#include <cmath>

#include "tensor/activation_kernels.h"
#include "tensor/elementwise.h"
#include "tensor/elementwise_internal.h"

namespace kiln::ops {
namespace {

void check_floating(std::string_view op, const Tensor& x) {
  KILN_CHECK(x.defined(), op, ": got an undefined tensor");
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating tensor, got ", x.dtype());
}

// The dtype and shape a backward computes in: grad and the saved tensor
// promote and broadcast as a binary op's operands (they normally agree).
struct BackwardOperands {
  Tensor grad, saved, out;
};
BackwardOperands backward_operands(std::string_view op, const Tensor& grad, const Tensor& saved) {
  KILN_CHECK(grad.defined() && saved.defined(), op, ": got an undefined tensor");
  elementwise::check_same_device(op, grad, saved);
  DType compute = result_type(grad, saved);
  KILN_CHECK(is_floating(compute), op, ": expected floating tensors, got ", grad.dtype(), " and ", saved.dtype());
  Shape shape = broadcast_shapes(grad.shape(), saved.shape(), op);
  return {grad.to(compute).expand(shape), saved.to(compute).expand(shape),
          Tensor::empty(shape, {compute, grad.device()})};
}

// The bounds of hardtanh as the clamp receives them: as given for floating
// x, truncated to integers for integer x (torch's legacy rule, so that
// integer tensors are not promoted to float).
struct Bounds {
  Scalar lo, hi;
};
Bounds hardtanh_bounds(std::string_view op, const Tensor& x, double min_val, double max_val) {
  KILN_CHECK(x.defined(), op, ": got an undefined tensor");
  KILN_CHECK(x.dtype() != DType::Bool, op, ": bool tensors are not supported");
  KILN_CHECK(!x.is_quantized(), op, ": quantized ", x.dtype(),
             " tensors are not supported (clamping the stored integers would ignore the scale); dequantize it first");
  KILN_CHECK(!(min_val > max_val), op, ": min_val (", min_val, ") is greater than max_val (", max_val, ")");
  if (x.is_floating_point()) return {min_val, max_val};
  for (double bound : {min_val, max_val}) {
    KILN_CHECK(std::isfinite(bound) && std::fabs(bound) < 0x1p63, op, ": bound ", bound, " does not fit the ",
               x.dtype(), " tensor's integers");
  }
  const int64_t lo = static_cast<int64_t>(min_val), hi = static_cast<int64_t>(max_val);
  KILN_CHECK(x.dtype() != DType::UInt8 || (lo >= 0 && hi >= 0), op,
             ": cannot clamp a uint8 tensor to negative bounds (min_val ", min_val, ", max_val ", max_val, ")");
  return {lo, hi};
}

}  // namespace

Tensor elu(const Tensor& x, double alpha) {
  check_floating("elu", x);
  Tensor out = Tensor::empty(x.shape(), {x.dtype(), x.device()});
  if (out.numel() > 0) kernels_for<ActivationKernels>(x.device(), "elu").elu(out, x, alpha);
  return out;
}

Tensor& elu_(Tensor& x, double alpha) {
  check_floating("elu_", x);
  elementwise::check_in_place("elu_", x, x.dtype());
  if (x.numel() == 0) return x;
  kernels_for<ActivationKernels>(x.device(), "elu_").elu(x, x, alpha);
  x.bump_version();
  return x;
}

Tensor elu_backward(const Tensor& grad, const Tensor& x_or_output, double alpha, bool from_output) {
  BackwardOperands b = backward_operands("elu_backward", grad, x_or_output);
  if (b.out.numel() > 0) {
    kernels_for<ActivationKernels>(b.out.device(), "elu_backward")
        .elu_backward(b.out, b.grad, b.saved, alpha, from_output);
  }
  return b.out;
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  Bounds b = hardtanh_bounds("hardtanh", x, min_val, max_val);
  return clamp(x, b.lo, b.hi);
}

Tensor& hardtanh_(Tensor& x, double min_val, double max_val) {
  Bounds b = hardtanh_bounds("hardtanh_", x, min_val, max_val);
  elementwise::check_in_place("hardtanh_", x, x.dtype());
  return clamp_(x, b.lo, b.hi);
}

Tensor hardtanh_backward(const Tensor& grad, const Tensor& x, double min_val, double max_val) {
  BackwardOperands b = backward_operands("hardtanh_backward", grad, x);
  if (b.out.numel() > 0) {
    kernels_for<ActivationKernels>(b.out.device(), "hardtanh_backward")
        .hardtanh_backward(b.out, b.grad, b.saved, min_val, max_val);
  }
  return b.out;
}

}  // namespace kiln::ops
