// Max, average and adaptive average pooling, each with its backward as an op
// of its own (Note [Backward kernels and double backward] in
// nn/functional.h). Every pooling gradient is linear in grad_out, and the
// adjoint of "grad_out -> grad_input" is the forward pooling itself (with the
// argmax fixed, for max), which is what differentiates the backward.
#include "autograd/function.h"
#include "nn/functional.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// The max pooling output gathered from `x` at `indices` (positions in each
// (H, W) plane, -1 for a window with no tap inside the input, which gets 0).
// Differentiable in x: the adjoint of max_pool2d_backward.
Tensor gather_at_indices(const Tensor& x, const Tensor& indices) {
  // x: (*, H, W) -> (*, H*W); indices: (*, oh, ow) -> (*, oh*ow)
  Tensor flat_index = indices.flatten(-2);
  Tensor valid = ops::ge(flat_index, 0);
  Tensor picked = kiln::gather(x.flatten(-2), -1, ops::where(valid, flat_index, 0));
  return kiln::where(valid, picked, 0).view(indices.shape());
}

// grad_out (*, oh, ow) scattered to `input_shape` at `indices`.
Tensor max_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const Tensor& indices,
                           const kiln::MaxPool2dOptions& options) {
  Tensor grad_input =
      autograd::untracked([&] { return ops::max_pool2d_backward(grad_out, input_shape, indices, options); });
  if (autograd::needs_grad({grad_out})) {
    autograd::record("max_pool2d_backward", {grad_out}, {grad_input},
                     [indices](const TensorList& gg) -> TensorList { return {gather_at_indices(gg[0], indices)}; });
  }
  return grad_input;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const kiln::AvgPool2dOptions& options) {
  Tensor grad_input = autograd::untracked([&] { return ops::avg_pool2d_backward(grad_out, input_shape, options); });
  if (autograd::needs_grad({grad_out})) {
    autograd::record("avg_pool2d_backward", {grad_out}, {grad_input}, [options](const TensorList& gg) -> TensorList {
      return {functional::avg_pool2d(gg[0], options)};
    });
  }
  return grad_input;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape) {
  Tensor grad_input = autograd::untracked([&] { return ops::adaptive_avg_pool2d_backward(grad_out, input_shape); });
  if (autograd::needs_grad({grad_out})) {
    Size2d output_size(grad_out.size(-2), grad_out.size(-1));
    autograd::record("adaptive_avg_pool2d_backward", {grad_out}, {grad_input},
                     [output_size](const TensorList& gg) -> TensorList {
                       return {functional::adaptive_avg_pool2d(gg[0], output_size)};
                     });
  }
  return grad_input;
}

}  // namespace

PoolResult max_pool2d_with_indices(const Tensor& x, const kiln::MaxPool2dOptions& options) {
  PoolResult result = autograd::untracked([&] { return ops::max_pool2d_with_indices(x, options); });
  if (autograd::needs_grad({x})) {
    autograd::record("max_pool2d", {x}, {result.values},
                     [shape = x.shape(), indices = SavedTensor(result.indices), options](const TensorList& g)
                         -> TensorList { return {max_pool2d_backward(g[0], shape, indices.get(), options)}; });
  }
  return result;
}

Tensor max_pool2d(const Tensor& x, const kiln::MaxPool2dOptions& options) {
  // Without a backward to come the indices are not computed (inference).
  if (!autograd::needs_grad({x})) return ops::max_pool2d(x, options);
  return max_pool2d_with_indices(x, options).values;
}

Tensor avg_pool2d(const Tensor& x, const kiln::AvgPool2dOptions& options) {
  Tensor out = autograd::untracked([&] { return ops::avg_pool2d(x, options); });
  if (autograd::needs_grad({x})) {
    autograd::record("avg_pool2d", {x}, {out}, [shape = x.shape(), options](const TensorList& g) -> TensorList {
      return {avg_pool2d_backward(g[0], shape, options)};
    });
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2d output_size) {
  Tensor out = autograd::untracked([&] { return ops::adaptive_avg_pool2d(x, output_size); });
  if (autograd::needs_grad({x})) {
    autograd::record("adaptive_avg_pool2d", {x}, {out}, [shape = x.shape()](const TensorList& g) -> TensorList {
      return {adaptive_avg_pool2d_backward(g[0], shape)};
    });
  }
  return out;
}

}  // namespace kiln::nn::functional
