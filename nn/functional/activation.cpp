// Activations, flatten and linear. Most are the differentiable kiln::
// functions of autograd/ under torch.nn.functional's names; leaky_relu is
// the one recorded here.
#include "autograd/function.h"
#include "nn/functional.h"

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
