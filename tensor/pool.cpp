// Front-ends of the 2-d pooling ops: validate the arguments with torch's
// rules, work out the sizes (Pool2dShape) once, allocate, and dispatch
// (Note [Device dispatch]) with the options as they came (Note [One pooling
// parameter struct] in tensor/pool.h). The kernels see contiguous
// (N*C, H, W) planes.
#include "tensor/pool.h"

#include <string_view>

#include "tensor/backend.h"
#include "tensor/factory.h"
#include "tensor/memory_layout.h"
#include "tensor/quantize.h"
#include "tensor/quantized_grid.h"
#include "tensor/quantized_kernels.h"

namespace kiln::ops {
namespace {

// An input shape the pooling ops accept: (N, C, H, W) or (C, H, W) with
// non-zero C, H, W; `what` names the tensor in the message.
void check_input_shape(const Shape& shape, std::string_view op, std::string_view what) {
  KILN_CHECK(shape.size() == 3 || shape.size() == 4, op, ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) ", what,
             ", got shape ", shape);
  size_t first = shape.size() - 3;
  KILN_CHECK(shape[first] > 0 && shape[first + 1] > 0 && shape[first + 2] > 0, op, ": expected ", what,
             " with non-zero C, H and W (only N may be 0), got shape ", shape);
}

void check_input(const Tensor& x, std::string_view op) {
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  check_input_shape(x.shape(), op, "input");
  KILN_CHECK(x.is_floating_point() || x.is_quantized(), op, ": expected a floating point input, got ", x.dtype(),
             " (integer tensors are pooled only when quantized)");
}

// `shape` with its last two sizes replaced by (h, w).
Shape with_plane(Shape shape, int64_t h, int64_t w) {
  shape[shape.size() - 2] = h;
  shape[shape.size() - 1] = w;
  return shape;
}

// A contiguous tensor seen as (planes, h, w): the kernels' layout. Per-tensor
// params go along (the quantized kernels read them); per-channel ones are
// left behind, since merging N and C would destroy their axis (Note
// [Quantization parameters through views]) and float kernels read values only.
Tensor as_planes(const Tensor& t) {
  int64_t h = t.size(-2), w = t.size(-1);
  Tensor base = t;
  const auto& params = t.impl()->quant_params();
  if (params && params->scheme == QuantParams::Scheme::PerChannel) {
    base = t.detach();
    base.impl()->set_quant_params(nullptr);
  }
  return base.view({t.numel() / (h * w), h, w});
}

// Checks the window settings against torch's rules and the input's (H, W),
// and works out the output's (oh, ow). Max and average pooling share it,
// average pooling with a dilation of 1.
Pool2dShape window_shape(const Shape& input_shape, Size2d kernel, Size2d stride, Size2d padding, Size2d dilation,
                         bool ceil_mode, std::string_view op) {
  KILN_CHECK(kernel.h > 0 && kernel.w > 0, op, ": kernel size must be positive, got ", kernel.h, " x ", kernel.w);
  KILN_CHECK(stride.h > 0 && stride.w > 0, op, ": stride must be positive, got ", stride.h, " x ", stride.w);
  KILN_CHECK(dilation.h > 0 && dilation.w > 0, op, ": dilation must be positive, got ", dilation.h, " x ",
             dilation.w);
  KILN_CHECK(padding.h >= 0 && padding.w >= 0, op, ": padding must be non-negative, got ", padding.h, " x ",
             padding.w);
  KILN_CHECK(padding.h <= kernel.h / 2 && padding.w <= kernel.w / 2, op,
             ": padding must be at most half the kernel size, got padding ", padding.h, " x ", padding.w,
             " for kernel ", kernel.h, " x ", kernel.w);
  Size2d input(input_shape[input_shape.size() - 2], input_shape.back());
  Pool2dShape s{input, Size2d(pool_output_size(input.h, kernel.h, stride.h, padding.h, dilation.h, ceil_mode),
                              pool_output_size(input.w, kernel.w, stride.w, padding.w, dilation.w, ceil_mode))};
  KILN_CHECK(s.output.h > 0 && s.output.w > 0, op, ": input ", input.h, " x ", input.w, " is too small for kernel ",
             kernel.h, " x ", kernel.w, " with padding ", padding.h, " x ", padding.w, ", dilation ", dilation.h, " x ",
             dilation.w, " and stride ", stride.h, " x ", stride.w, ": the output would be ", s.output.h, " x ",
             s.output.w);
  return s;
}

Pool2dShape pool2d_shape(const Shape& input_shape, const MaxPool2dOptions& o, std::string_view op) {
  return window_shape(input_shape, o.kernel, o.stride_or_kernel(), o.padding, o.dilation, o.ceil_mode, op);
}

Pool2dShape pool2d_shape(const Shape& input_shape, const AvgPool2dOptions& o, std::string_view op) {
  KILN_CHECK(!o.divisor_override || *o.divisor_override != 0, op, ": divisor_override must be non-zero");
  return window_shape(input_shape, o.kernel, o.stride_or_kernel(), o.padding, 1, o.ceil_mode, op);
}

// The checks every backward shares: grad_out defined, floating, and of the
// input's rank and leading (N, C) sizes.
void check_grad(const Tensor& grad_out, const Shape& input_shape, std::string_view op) {
  KILN_CHECK(grad_out.defined(), op, ": grad_out is undefined");
  check_input_shape(input_shape, op, "input shape");
  KILN_CHECK(grad_out.is_floating_point(), op, ": expected a floating point grad_out, got ", grad_out.dtype());
  bool leading_match = grad_out.dim() == static_cast<int64_t>(input_shape.size());
  for (size_t d = 0; leading_match && d + 2 < input_shape.size(); ++d) {
    leading_match = grad_out.size(static_cast<int64_t>(d)) == input_shape[d];
  }
  KILN_CHECK(leading_match, op, ": grad_out of shape ", grad_out.shape(), " does not fit input shape ",
             input_shape, " (expected the same rank and the same sizes but the last two)");
}

}  // namespace

int64_t pool_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                         bool ceil_mode) {
  int64_t span = input + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division, also for a negative span (C++ `/` truncates toward 0).
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= input + pad) --out;
  return out;
}

namespace {

// Pooling of a quantized x by its device's quantized kernels: the output,
// of `out_shape`, stands on x's grid (per tensor only: the kernels see the
// planes of all channels alike).
template <class Run>
Tensor quantized_pool(const Tensor& x, const Shape& out_shape, std::string_view op, const Run& run) {
  const auto& params = x.impl()->quant_params();
  KILN_CHECK(params->scheme == QuantParams::Scheme::PerTensor, op, ": the input is quantized per channel (axis ",
             params->axis, "); quantized pooling takes per-tensor quantized inputs");
  QuantizedKernels& kernels = quantized_kernels_for(x.device(), op);
  // A channels-last input (an int8 convolution's output) is pooled as it
  // lies, into a channels-last output (Note [Channels-last quantized
  // activations] in tensor/memory_layout.h).
  const bool channels_last = !x.is_contiguous() && is_channels_last(x);
  Tensor out = channels_last ? empty_channels_last(out_shape, {x.dtype(), x.device()})
                             : Tensor::empty(out_shape, {x.dtype(), x.device()});
  out.impl()->set_quant_params(params);
  if (out.numel() == 0) return out;
  if (channels_last) run(kernels, out, x);
  else run(kernels, as_planes(out), as_planes(x.contiguous()));
  return out;
}

// Max pooling's values, and its indices when `with_indices`.
PoolResult max_pool(const Tensor& x, const MaxPool2dOptions& options, bool with_indices) {
  check_input(x, "max_pool2d");
  Pool2dShape s = pool2d_shape(x.shape(), options, "max_pool2d");
  Shape out_shape = with_plane(x.shape(), s.output.h, s.output.w);
  if (x.is_quantized()) {
    // Inference only: no backward needs the indices, and the kernels give none.
    KILN_CHECK(!with_indices, "max_pool2d_with_indices: the input is a quantized tensor (",
               quantized_dtype_name(x.dtype()), "); quantized max pooling gives values only: call max_pool2d");
    return {quantized_pool(
                x, out_shape, "max_pool2d",
                [&](QuantizedKernels& k, const Tensor& out, const Tensor& in) { k.max_pool2d(out, in, options, s); }),
            Tensor()};
  }
  PoolResult result{keep_grid(x, Tensor::empty(out_shape, {x.dtype(), x.device()})),
                    with_indices ? Tensor::empty(out_shape, {DType::Int64, x.device()}) : Tensor()};
  if (result.values.numel() == 0) return result;
  backend_for(x.device())
      .max_pool2d(as_planes(result.values), with_indices ? as_planes(result.indices) : Tensor(),
                  as_planes(x.contiguous()), options, s);
  return result;
}

}  // namespace

PoolResult max_pool2d_with_indices(const Tensor& x, const MaxPool2dOptions& options) {
  return max_pool(x, options, true);
}

Tensor max_pool2d(const Tensor& x, const MaxPool2dOptions& options) { return max_pool(x, options, false).values; }

Tensor max_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const Tensor& indices,
                           const MaxPool2dOptions& options) {
  constexpr std::string_view op = "max_pool2d_backward";
  check_grad(grad_out, input_shape, op);
  KILN_CHECK(indices.defined(), op, ": indices is undefined");
  KILN_CHECK(indices.dtype() == DType::Int64, op, ": expected int64 indices, got ", indices.dtype());
  KILN_CHECK(indices.shape() == grad_out.shape(), op, ": grad_out of shape ", grad_out.shape(),
             " does not match indices of shape ", indices.shape());
  KILN_CHECK(indices.device() == grad_out.device(), op, ": grad_out is on ", grad_out.device(),
             " but indices on ", indices.device());
  Pool2dShape s = pool2d_shape(input_shape, options, op);
  Shape expected = with_plane(input_shape, s.output.h, s.output.w);
  KILN_CHECK(grad_out.shape() == expected, op, ": expected grad_out of shape ", expected, " for input shape ",
             input_shape, ", got ", grad_out.shape());
  Tensor grad_x = Tensor::empty(input_shape, {grad_out.dtype(), grad_out.device()});
  if (grad_x.numel() == 0) return grad_x;
  backend_for(grad_out.device())
      .max_pool2d_backward(as_planes(grad_x), as_planes(grad_out.contiguous()), as_planes(indices.contiguous()),
                           options, s);
  return grad_x;
}

Tensor avg_pool2d(const Tensor& x, const AvgPool2dOptions& options) {
  check_input(x, "avg_pool2d");
  Pool2dShape s = pool2d_shape(x.shape(), options, "avg_pool2d");
  Shape out_shape = with_plane(x.shape(), s.output.h, s.output.w);
  if (x.is_quantized()) {
    return quantized_pool(x, out_shape, "avg_pool2d", [&](QuantizedKernels& k, const Tensor& out, const Tensor& in) {
      k.avg_pool2d(out, in, options, s);
    });
  }
  Tensor out = Tensor::empty(out_shape, {x.dtype(), x.device()});
  if (out.numel() == 0) return out;
  backend_for(x.device()).avg_pool2d(as_planes(out), as_planes(x.contiguous()), options, s);
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const AvgPool2dOptions& options) {
  constexpr std::string_view op = "avg_pool2d_backward";
  check_grad(grad_out, input_shape, op);
  Pool2dShape s = pool2d_shape(input_shape, options, op);
  Shape expected = with_plane(input_shape, s.output.h, s.output.w);
  KILN_CHECK(grad_out.shape() == expected, op, ": expected grad_out of shape ", expected, " for input shape ",
             input_shape, ", got ", grad_out.shape());
  Tensor grad_x = Tensor::empty(input_shape, {grad_out.dtype(), grad_out.device()});
  if (grad_x.numel() == 0) return grad_x;
  backend_for(grad_out.device()).avg_pool2d_backward(as_planes(grad_x), as_planes(grad_out.contiguous()), options, s);
  return grad_x;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2d output_size) {
  check_input(x, "adaptive_avg_pool2d");
  KILN_CHECK(output_size.h >= 0 && output_size.w >= 0, "adaptive_avg_pool2d: output size must be non-negative, got ",
             output_size.h, " x ", output_size.w);
  if (x.is_quantized()) {
    return quantized_pool(x, with_plane(x.shape(), output_size.h, output_size.w), "adaptive_avg_pool2d",
                          [](QuantizedKernels& k, const Tensor& out, const Tensor& in) { k.adaptive_avg_pool2d(out, in); });
  }
  Tensor out = Tensor::empty(with_plane(x.shape(), output_size.h, output_size.w), {x.dtype(), x.device()});
  if (out.numel() == 0) return out;
  backend_for(x.device()).adaptive_avg_pool2d(as_planes(out), as_planes(x.contiguous()));
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape) {
  check_grad(grad_out, input_shape, "adaptive_avg_pool2d_backward");
  // An empty output (size 0) passes no gradient: zeros.
  if (grad_out.numel() == 0) return zeros(input_shape, {grad_out.dtype(), grad_out.device()});
  Tensor grad_x = Tensor::empty(input_shape, {grad_out.dtype(), grad_out.device()});
  backend_for(grad_out.device()).adaptive_avg_pool2d_backward(as_planes(grad_x), as_planes(grad_out.contiguous()));
  return grad_x;
}

}  // namespace kiln::ops
