// Front-ends of im2col / col2im and conv2d: check the Conv2dParams against
// the tensors, derive the Conv2dShape once, allocate the result, dispatch
// (Note [Device dispatch]).
#include "tensor/conv.h"

#include "tensor/backend.h"
#include "tensor/conv_shape.h"
#include "tensor/reduce.h"

namespace kiln::ops {

// The shape of one group with these sizes and settings, after rejecting any
// with no valid output; the settings are checked before the output size is
// computed from them (a zero stride would divide by it). `op` names the
// caller.
static Conv2dShape checked_shape(int64_t channels, Size2d input, Size2d kernel, const Conv2dParams& p,
                                 std::string_view op) {
  KILN_CHECK(channels > 0 && input.h > 0 && input.w > 0, op, ": expected a positive input size, got C=", channels,
             " H=", input.h, " W=", input.w);
  KILN_CHECK(kernel.h > 0 && kernel.w > 0, op, ": kernel size must be positive, got ", kernel.h, " x ", kernel.w);
  KILN_CHECK(p.stride.h > 0 && p.stride.w > 0, op, ": stride must be positive, got ", p.stride.h, " x ", p.stride.w);
  KILN_CHECK(p.dilation.h > 0 && p.dilation.w > 0, op, ": dilation must be positive, got ", p.dilation.h, " x ",
             p.dilation.w);
  KILN_CHECK(p.padding.h >= 0 && p.padding.w >= 0, op, ": padding must be non-negative, got ", p.padding.h, " x ",
             p.padding.w);
  // Checked on the extents rather than on the output size: C++ division
  // truncates toward zero, so a kernel one step too large would still give
  // an output size of 1.
  const int64_t extent_h = p.dilation.h * (kernel.h - 1) + 1, extent_w = p.dilation.w * (kernel.w - 1) + 1;
  const int64_t padded_h = input.h + 2 * p.padding.h, padded_w = input.w + 2 * p.padding.w;
  KILN_CHECK(extent_h <= padded_h && extent_w <= padded_w, op, ": kernel ", kernel.h, " x ", kernel.w,
             " with dilation ", p.dilation.h, " x ", p.dilation.w, " spans ", extent_h, " x ", extent_w,
             ", more than the padded input ", padded_h, " x ", padded_w, " (output size would be < 1)");
  return conv2d_shape(channels, input, kernel, p);
}

// im2col and col2im unfold one group.
static void check_one_group(const Conv2dParams& p, std::string_view op) {
  KILN_CHECK(p.groups == 1, op, ": unfolds one group, so groups must be 1, got ", p.groups);
}

Tensor im2col(const Tensor& x, Size2d kernel, const Conv2dParams& p) {
  KILN_CHECK(x.defined(), "im2col: x is undefined");
  KILN_CHECK(x.dim() == 4, "im2col: expected a 4-d input (N, C, H, W), got shape ", x.shape());
  check_one_group(p, "im2col");
  const Conv2dShape s = checked_shape(x.size(1), {x.size(2), x.size(3)}, kernel, p, "im2col");
  // cols: (N, C*kh*kw, oh*ow)
  Tensor cols = Tensor::empty({x.size(0), s.channels * s.kernel.h * s.kernel.w, s.output.h * s.output.w},
                              {x.dtype(), x.device()});
  if (cols.numel() > 0) backend_for(x.device()).im2col(cols, x, p, s);
  return cols;
}

Tensor col2im(const Tensor& cols, Size2d input, Size2d kernel, const Conv2dParams& p) {
  KILN_CHECK(cols.defined(), "col2im: cols is undefined");
  check_one_group(p, "col2im");
  KILN_CHECK(kernel.h > 0 && kernel.w > 0, "col2im: kernel size must be positive, got ", kernel.h, " x ", kernel.w);
  const int64_t taps = kernel.h * kernel.w;
  KILN_CHECK(cols.dim() == 3 && cols.size(1) % taps == 0, "col2im: expected cols of shape [N, C*kh*kw, oh*ow] with ",
             "C*kh*kw a multiple of kh*kw = ", taps, ", got ", cols.shape());
  const Conv2dShape s = checked_shape(cols.size(1) / taps, input, kernel, p, "col2im");
  const int64_t positions = s.output.h * s.output.w;
  KILN_CHECK(cols.size(2) == positions, "col2im: expected cols of shape [N, ", cols.size(1), ", ", positions,
             "] (C*kh*kw, oh*ow) for an input of ", input.h, " x ", input.w, ", got ", cols.shape());
  // x: (N, C, H, W)
  Tensor x = Tensor::empty({cols.size(0), s.channels, input.h, input.w}, {cols.dtype(), cols.device()});
  if (x.numel() > 0) backend_for(cols.device()).col2im(x, cols, p, s);
  return x;
}

// ---- conv2d -------------------------------------------------------------------

Conv2dShape conv2d_group_shape(const Tensor& x, const Tensor& weight, const Conv2dParams& p, std::string_view op) {
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape ",
             x.shape());
  KILN_CHECK(weight.dim() == 4, op, ": expected a 4-d weight (OC, C/groups, kh, kw), got shape ", weight.shape());
  KILN_CHECK(p.groups > 0, op, ": groups must be positive, got ", p.groups);
  const int64_t channels = x.size(-3), out_channels = weight.size(0);
  KILN_CHECK(channels == weight.size(1) * p.groups, op, ": input of shape ", x.shape(), " has ", channels,
             " channels, but weight of shape ", weight.shape(), " with groups=", p.groups, " expects ",
             weight.size(1), " * ", p.groups, " = ", weight.size(1) * p.groups);
  KILN_CHECK(out_channels % p.groups == 0, op, ": weight of shape ", weight.shape(), " has ", out_channels,
             " output channels, not divisible by groups=", p.groups);
  return checked_shape(weight.size(1), {x.size(-2), x.size(-1)}, {weight.size(2), weight.size(3)}, p, op);
}

namespace {

// Checks x and weight against each other and p, and returns the shape of
// one group (channels = C / groups). `op` names the caller.
Conv2dShape checked_conv2d_shape(const Tensor& x, const Tensor& weight, const Conv2dParams& p, std::string_view op) {
  KILN_CHECK(x.defined() && weight.defined(), op, ": x or weight is undefined");
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape ",
             x.shape());
  KILN_CHECK(weight.dim() == 4, op, ": expected a 4-d weight (OC, C/groups, kh, kw), got shape ", weight.shape());
  KILN_CHECK(x.dtype() == weight.dtype(), op, ": expected x and weight of one dtype, got ", x.dtype(), " and ",
             weight.dtype());
  KILN_CHECK(x.is_floating_point(), op, ": expected floating point tensors, got ", x.dtype());
  KILN_CHECK(x.device() == weight.device(), op, ": expected x and weight on one device, got ", x.device(), " and ",
             weight.device());
  return conv2d_group_shape(x, weight, p, op);
}

// The dtype the kernels of x's backend run in: the dtype itself when the
// backend takes it, else float32 (16-bit floats on the CPU, whose GEMM
// accumulates in float32 without losing the products' precision).
DType compute_dtype(const Tensor& x) {
  return backend_for(x.device()).conv2d_takes(x.dtype()) ? x.dtype() : DType::Float32;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const Conv2dShape s = checked_conv2d_shape(x, weight, p, "conv2d");
  const int64_t out_channels = weight.size(0), group_out = out_channels / p.groups;
  if (bias.defined()) {
    KILN_CHECK(bias.dtype() == x.dtype(), "conv2d: expected bias of dtype ", x.dtype(), " like x, got ",
               bias.dtype());
    KILN_CHECK(bias.device() == x.device(), "conv2d: expected bias on ", x.device(), " like x, got ",
               bias.device());
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv2d: bias must have shape [", out_channels,
               "], got ", bias.shape());
  }
  const bool unbatched = x.dim() == 3;
  const DType compute = compute_dtype(x);
  Tensor x4 = (unbatched ? x.unsqueeze(0) : x).to(compute);  // (N, C, H, W), any strides
  // (OC, C/groups * kh * kw): a view of a contiguous weight.
  Tensor w2 = weight.to(compute).reshape({out_channels, s.channels * s.kernel.h * s.kernel.w});
  Tensor b = bias.defined() ? bias.to(compute) : Tensor();
  Tensor out = Tensor::empty({x4.size(0), out_channels, s.output.h, s.output.w}, {compute, x.device()});
  if (out.numel() > 0) {
    Backend& backend = backend_for(x.device());
    for (int64_t group = 0; group < p.groups; ++group) {
      const int64_t c0 = group * s.channels, o0 = group * group_out;
      backend.conv2d(out.slice(1, o0, o0 + group_out), x4.slice(1, c0, c0 + s.channels),
                     w2.slice(0, o0, o0 + group_out), b.defined() ? b.slice(0, o0, o0 + group_out) : Tensor(), p, s);
    }
  }
  out = out.to(x.dtype());
  return unbatched ? out.squeeze(0) : out;
}

Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                            std::array<bool, 3> output_mask) {
  const Conv2dShape s = checked_conv2d_shape(x, weight, p, "conv2d_backward");
  const int64_t out_channels = weight.size(0), group_out = out_channels / p.groups;
  const bool unbatched = x.dim() == 3;
  KILN_CHECK(grad_out.defined(), "conv2d_backward: grad_out is undefined");
  Shape out_shape{out_channels, s.output.h, s.output.w};
  if (!unbatched) out_shape.insert(out_shape.begin(), x.size(0));
  KILN_CHECK(grad_out.shape() == out_shape, "conv2d_backward: grad_out has shape ", grad_out.shape(),
             ", but conv2d's output for x ", x.shape(), " and weight ", weight.shape(), " has shape ", out_shape);
  KILN_CHECK(grad_out.dtype() == x.dtype() && grad_out.device() == x.device(), "conv2d_backward: grad_out is ",
             grad_out.dtype(), " on ", grad_out.device(), ", x is ", x.dtype(), " on ", x.device());

  const DType compute = compute_dtype(x);
  Tensor x4 = (unbatched ? x.unsqueeze(0) : x).to(compute);  // (N, C, H, W), any strides
  // (N, OC, oh, ow) with contiguous planes, as the kernel needs; an expanded
  // grad_out (the gradient of a sum) becomes real memory here.
  Tensor go = (unbatched ? grad_out.unsqueeze(0) : grad_out).to(compute).contiguous();
  const int64_t ckk = s.channels * s.kernel.h * s.kernel.w;
  Tensor w2 = weight.to(compute).reshape({out_channels, ckk});  // (OC, C/groups * kh * kw)
  Tensor grad_input = output_mask[0] ? Tensor::empty(x4.shape(), {compute, x.device()}) : Tensor();
  Tensor grad_weight = output_mask[1] ? Tensor::empty({out_channels, ckk}, {compute, x.device()}) : Tensor();
  Tensor grad_bias = output_mask[2] ? Tensor::empty({out_channels}, {compute, x.device()}) : Tensor();
  if (grad_input.defined() || grad_weight.defined() || grad_bias.defined()) {
    Backend& backend = backend_for(x.device());
    auto slice_or_undefined = [](const Tensor& t, int64_t dim, int64_t begin, int64_t length) {
      return t.defined() ? t.slice(dim, begin, begin + length) : Tensor();
    };
    for (int64_t group = 0; group < p.groups; ++group) {
      const int64_t c0 = group * s.channels, o0 = group * group_out;
      backend.conv2d_backward(slice_or_undefined(grad_input, 1, c0, s.channels),
                              slice_or_undefined(grad_weight, 0, o0, group_out),
                              slice_or_undefined(grad_bias, 0, o0, group_out), go.slice(1, o0, o0 + group_out),
                              x4.slice(1, c0, c0 + s.channels), w2.slice(0, o0, o0 + group_out), p, s);
    }
  }

  Conv2dGrads grads;
  if (grad_input.defined()) grads.grad_input = (unbatched ? grad_input.squeeze(0) : grad_input).to(x.dtype());
  if (grad_weight.defined()) grads.grad_weight = grad_weight.view(weight.shape()).to(x.dtype());
  if (grad_bias.defined()) grads.grad_bias = grad_bias.to(x.dtype());
  return grads;
}

}  // namespace kiln::ops
