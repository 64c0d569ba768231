// 2-d pooling: max (with the argmax indices), average and adaptive average,
// forward and backward, with torch.nn.functional's semantics; the settings
// of max and average pooling and the sizes they give (Pool2dShape).
//
// Inputs are (N, C, H, W) or (C, H, W) floating tensors (N may be 0; C, H
// and W may not); the result keeps the input's rank. The options mirror
// torch's arguments, one Size2d per pair of spatial sizes (an int means
// both), with designated initializers for the ones that differ from torch's
// defaults:
//   auto [y, idx] = ops::max_pool2d_with_indices(x, {.kernel = 2});     // LeNet
//   Tensor a = ops::avg_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true});
//   Tensor g = ops::avg_pool2d(x, {.kernel = {3, 2}, .stride = Size2d(2, 1)});
// (stride is a std::optional, which a braced pair cannot initialize: spell
// out Size2d there.)
//
// The backward functions give the gradient with respect to the input from
// the gradient of the output; the autograd layer wraps each pair into one
// differentiable op. Non-contiguous inputs are copied to contiguous first.
#pragma once

#include <optional>

#include "tensor/size2d.h"
#include "tensor/tensor.h"

namespace kiln {

// Note [One pooling parameter struct]
// Max and average pooling follow Note [One convolution parameter struct]
// in tensor/conv.h: their settings are one MaxPool2dOptions or
// AvgPool2dOptions from the layer down to the kernel. nn::MaxPool2d and
// nn::AvgPool2d hold one (LibTorch's builders convert to it when the layer
// is built), F:: and ops::max_pool2d and avg_pool2d take it, and the
// backends' kernels, float and int8 (ops:: pools quantized tensors too),
// receive that same object. Beside it goes a Pool2dShape, the input's and
// output's (H, W), which the front-end (tensor/pool.cpp) works out once
// from the tensor and the options; the output size follows ceil_mode there
// (pool_output_size), so no kernel reads ceil_mode or derives a size again.
//
// stride is a std::optional, unset meaning "the kernel size" as in torch,
// and it stays unset on the way down: whatever needs the stride (the
// front-end's checks, the kernels, the layer's repr) asks
// stride_or_kernel(). Resolving it once in the front-end instead would give
// the struct two states, resolved or not, and a kernel handed the user's
// options would read an empty optional. CUDA device code cannot call it,
// nor read the optional (its members are host code, and nvcc refuses both),
// so each launcher passes stride_or_kernel() beside the options, and
// divisor_override as an int (0 for none).
//
// Where max and average pooling share code (the CPU's taps and its 2x2 /
// stride 2 fast path, the CUDA backward's covering outputs), the helper
// takes the fields it needs rather than either struct, average pooling
// passing a dilation of 1. Adaptive pooling has no setting but its output
// size, which its kernels read from the tensors.

// torch.nn.functional.max_pool2d's arguments. stride defaults to the kernel.
struct MaxPool2dOptions {
  Size2d kernel;
  std::optional<Size2d> stride = std::nullopt;
  Size2d padding = 0;
  Size2d dilation = 1;
  bool ceil_mode = false;

  // The stride the windows move by: stride when given, else the kernel.
  Size2d stride_or_kernel() const { return stride.value_or(kernel); }
};

// torch.nn.functional.avg_pool2d's arguments. stride defaults to the kernel;
// divisor_override, when given, replaces every window's element count.
struct AvgPool2dOptions {
  Size2d kernel;
  std::optional<Size2d> stride = std::nullopt;
  Size2d padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override = std::nullopt;

  // The stride the windows move by: stride when given, else the kernel.
  Size2d stride_or_kernel() const { return stride.value_or(kernel); }
};

// The sizes of a max or average pooling, for the kernels (Note [One pooling
// parameter struct]); output follows from input and the options by
// ops::pool_output_size.
struct Pool2dShape {
  Size2d input;   // (H, W)
  Size2d output;  // (oh, ow)
};

// Max pooling's result: the maxima and, for each, the position of the input
// element it came from, as an Int64 index into that element's (H, W) plane
// (iy * W + ix), as torch.
struct PoolResult {
  Tensor values;
  Tensor indices;
};

}  // namespace kiln

namespace kiln::ops {

// The number of windows along one dim, as torch's pooling_output_shape:
//   floor mode: floor((input + 2*pad - dilation*(kernel-1) - 1) / stride) + 1
//   ceil mode:  the same with ceil instead of floor, minus one when the last
//               window would start at or beyond input + pad, so that every
//               window starts inside the input or its left padding.
// Floor division rounds toward -inf, so a kernel wider than the padded input
// gives 0 (or less), which the pooling ops reject.
//   pool_output_size(28, 2, 2, 0, 1, false) == 14
//   pool_output_size(5, 2, 2, 0, 1, true) == 3   // floor mode: 2
int64_t pool_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                         bool ceil_mode);

// Max over each window, padding counting as -inf. NaN propagates: a window
// holding NaN gives NaN (index: its last NaN). Ties give the first maximum
// in row-major window order. A window with no tap inside the input (only
// possible with dilation) gives -inf and index -1.
// Requires kernel, stride, dilation > 0, 0 <= padding <= kernel / 2 and an
// output size >= 1. float32, float64, float16, bfloat16.
PoolResult max_pool2d_with_indices(const Tensor& x, const MaxPool2dOptions& options);
// The values alone, as max_pool2d_with_indices(x, options).values, without
// computing or storing the indices: inference, where no backward needs them.
Tensor max_pool2d(const Tensor& x, const MaxPool2dOptions& options);
// The gradient of max pooling with `options` over `input_shape`: zeros with
// grad_out[i] added at indices[i] (summed where windows overlap). grad_out
// and indices have max pooling's output shape; index -1 is skipped. An index
// must lie in its own window, as max_pool2d_with_indices gives it: the CUDA
// kernel gathers over the windows covering each input element, so it never
// sees one that points elsewhere (as torch's), while the CPU adds it there.
Tensor max_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const Tensor& indices,
                           const MaxPool2dOptions& options);

// Mean over each window. The divisor is options.divisor_override when given,
// else the window's element count: clipped to the padded input when
// count_include_pad (torch's default), clipped to the input otherwise.
// Requires the same as max pooling (without dilation) and a non-zero
// divisor_override.
Tensor avg_pool2d(const Tensor& x, const AvgPool2dOptions& options);
// The gradient of avg_pool2d: each grad_out element divided by its window's
// divisor and added to every input element of the window.
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const AvgPool2dOptions& options);

// Mean over a grid of output_size windows that tile the input as torch does:
// output row i averages input rows floor(i*H/oh) .. ceil((i+1)*H/oh) - 1,
// columns alike, so windows overlap when H is not a multiple of oh.
// output_size >= 0 (0 gives an empty result).
Tensor adaptive_avg_pool2d(const Tensor& x, Size2d output_size);
// The gradient of adaptive_avg_pool2d; the output size is grad_out's.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape);

}  // namespace kiln::ops
