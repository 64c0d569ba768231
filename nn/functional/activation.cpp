// Activations, flatten and linear. Most are the differentiable kiln::
// functions of autograd/ under torch.nn.functional's names; leaky_relu, elu
// and hardtanh are recorded here.
#include "autograd/function.h"
#include "nn/functional.h"
#include "tensor/activation.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

Tensor relu(const Tensor& x) { return kiln::relu(x); }
Tensor& relu_(Tensor& x) { return kiln::relu_(x); }

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  KILN_CHECK(x.is_floating_point(), "leaky_relu: expected a floating tensor, got ", x.dtype());
  Tensor positive = ops::gt(x, 0);
  Tensor out = autograd::untracked([&] { return ops::where(positive, x, ops::mul(x, negative_slope)); });
  if (autograd::needs_grad({x})) {
    // The slope is chosen by the sign of x, as torch: at x == 0 the gradient
    // is negative_slope. Saving the mask rather than x keeps one bool per
    // element.
    autograd::record("leaky_relu", {x}, {out},
                     [mask = SavedTensor(positive), negative_slope](const TensorList& g) -> TensorList {
                       return {kiln::where(mask.get(), g[0], kiln::mul(g[0], negative_slope))};
                     });
  }
  return out;
}

// The backward reads the output, the only values left: out > 0 where
// x > 0 when negative_slope >= 0, so the mask is the forward's (at x == 0
// the gradient is negative_slope, as out-of-place). With a negative slope
// the signs flip and the input cannot be told from the output; torch
// refuses that too.
Tensor& leaky_relu_(Tensor& x, double negative_slope) {
  KILN_CHECK(x.is_floating_point(), "leaky_relu_: expected a floating tensor, got ", x.dtype());
  const bool record = autograd::records_inplace("leaky_relu_", x);
  KILN_CHECK(!record || negative_slope >= 0.0, "leaky_relu_: in place with a negative slope (", negative_slope,
             ") cannot be differentiated from its output; use the out-of-place leaky_relu");
  autograd::untracked([&] { x.copy_(ops::where(ops::gt(x, 0), x, ops::mul(x, negative_slope))); });
  if (record) {
    autograd::record_with_outputs("leaky_relu_", {x}, {x},
                                  [negative_slope](const TensorList& g, const TensorList& outs) -> TensorList {
                                    Tensor positive = autograd::untracked([&] { return ops::gt(outs[0], 0); });
                                    return {kiln::where(positive, g[0], kiln::mul(g[0], negative_slope))};
                                  });
  }
  return x;
}

namespace {

// g * elu'(x), from the input or (in place) from the output y: one pass
// (ops::elu_backward) in ordinary training; under create_graph the same
// written with differentiable ops, so that second derivatives flow. From
// the input the exponential is of min(x, 0), so that a large x, whose side
// where() drops, cannot make an inf that the second derivative multiplies
// by 0. From the output y + alpha is differentiated through y, whose
// history is this node: d(y + alpha)/dx = alpha e^x, as torch's.
Tensor elu_backward(const Tensor& g, const Tensor& x_or_output, double alpha, bool from_output) {
  if (!GradMode::is_enabled()) return ops::elu_backward(g, x_or_output, alpha, from_output);
  Tensor nonpositive = autograd::untracked([&] { return ops::le(x_or_output, 0); });
  Tensor slope = from_output ? kiln::add(x_or_output, alpha)
                             : kiln::mul(kiln::exp(kiln::clamp(x_or_output, std::nullopt, 0.0)), alpha);
  return kiln::where(nonpositive, kiln::mul(g, slope), g);
}

// g where min_val < x < max_val, else 0: linear in g and its own adjoint,
// so its node differentiates with itself (the gradient of x is zero almost
// everywhere), and every order is one pass of the kernel.
Tensor hardtanh_backward(const Tensor& g, const Tensor& x, double min_val, double max_val) {
  Tensor out = autograd::untracked([&] { return ops::hardtanh_backward(g, x, min_val, max_val); });
  if (autograd::needs_grad({g})) {
    autograd::record("hardtanh_backward", {g}, {out},
                     [saved_x = SavedTensor(x), min_val, max_val](const TensorList& gg) -> TensorList {
                       return {hardtanh_backward(gg[0], saved_x.get(), min_val, max_val)};
                     });
  }
  return out;
}

}  // namespace

Tensor elu(const Tensor& x, double alpha) {
  Tensor out = autograd::untracked([&] { return ops::elu(x, alpha); });
  if (autograd::needs_grad({x})) {
    autograd::record("elu", {x}, {out}, [saved_x = SavedTensor(x), alpha](const TensorList& g) -> TensorList {
      return {elu_backward(g[0], saved_x.get(), alpha, /*from_output=*/false)};
    });
  }
  return out;
}

// As leaky_relu_: the backward reads the output, y <= 0 exactly where
// x <= 0 when alpha >= 0 (at x == 0 the gradient is alpha, as
// out-of-place). A negative alpha flips the sign of the negative side, and
// torch refuses that too (in its backward; Kiln before writing, so that x
// is left as it was).
Tensor& elu_(Tensor& x, double alpha) {
  KILN_CHECK(x.defined(), "elu_: got an undefined tensor");
  KILN_CHECK(x.is_floating_point(), "elu_: expected a floating tensor, got ", x.dtype());
  const bool record = autograd::records_inplace("elu_", x);
  KILN_CHECK(!record || alpha >= 0.0, "elu_: in place with a negative alpha (", alpha,
             ") cannot be differentiated from its output; use the out-of-place elu");
  autograd::untracked([&] { ops::elu_(x, alpha); });
  if (record) {
    autograd::record_with_outputs("elu_", {x}, {x}, [alpha](const TensorList& g, const TensorList& outs) -> TensorList {
      return {elu_backward(g[0], outs[0], alpha, /*from_output=*/true)};
    });
  }
  return x;
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  Tensor out = autograd::untracked([&] { return ops::hardtanh(x, min_val, max_val); });
  if (autograd::needs_grad({x})) {
    autograd::record("hardtanh", {x}, {out},
                     [saved_x = SavedTensor(x), min_val, max_val](const TensorList& g) -> TensorList {
                       return {hardtanh_backward(g[0], saved_x.get(), min_val, max_val)};
                     });
  }
  return out;
}

namespace {

// hardtanh_ and relu6_, `op` naming the one called in errors. The output
// decides the gradient as the input does: clamping keeps a value strictly
// inside the bounds as it is and puts every other on a bound (or keeps a
// NaN), so there is no refused case of its own.
Tensor& hardtanh_inplace(std::string_view op, Tensor& x, double min_val, double max_val) {
  const bool record = autograd::records_inplace(op, x);
  autograd::untracked([&] { ops::hardtanh_(x, min_val, max_val); });
  if (record) {
    autograd::record_with_outputs("hardtanh_", {x}, {x},
                                  [min_val, max_val](const TensorList& g, const TensorList& outs) -> TensorList {
                                    return {hardtanh_backward(g[0], outs[0], min_val, max_val)};
                                  });
  }
  return x;
}

}  // namespace

Tensor& hardtanh_(Tensor& x, double min_val, double max_val) {
  return hardtanh_inplace("hardtanh_", x, min_val, max_val);
}

Tensor relu6(const Tensor& x) { return functional::hardtanh(x, 0.0, 6.0); }
Tensor& relu6_(Tensor& x) { return hardtanh_inplace("relu6_", x, 0.0, 6.0); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return kiln::gelu(x, approximate == GeluApproximation::Tanh);
}

Tensor sigmoid(const Tensor& x) { return kiln::sigmoid(x); }
Tensor tanh(const Tensor& x) { return kiln::tanh(x); }
Tensor softmax(const Tensor& x, int64_t dim) { return kiln::softmax(x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return kiln::log_softmax(x, dim); }

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) { return x.flatten(start_dim, end_dim); }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return kiln::linear(x, weight, bias); }

}  // namespace kiln::nn::functional
