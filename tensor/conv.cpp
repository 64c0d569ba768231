// Front-ends of im2col / col2im and conv2d: validate the geometry against
// the tensors, allocate the result, dispatch (Note [Device dispatch]).
#include "tensor/conv.h"

#include "tensor/conv_geometry.h"
#include "tensor/reduce.h"

namespace kiln::ops {

// Rejects geometries with no valid output; `op` names the caller.
static void check_geometry(const ConvGeometry& g, std::string_view op) {
  KILN_CHECK(g.channels > 0 && g.height > 0 && g.width > 0, op, ": expected a positive input size, got C=",
             g.channels, " H=", g.height, " W=", g.width);
  KILN_CHECK(g.kernel_h > 0 && g.kernel_w > 0, op, ": kernel size must be positive, got ", g.kernel_h, " x ",
             g.kernel_w);
  KILN_CHECK(g.stride_h > 0 && g.stride_w > 0, op, ": stride must be positive, got ", g.stride_h, " x ",
             g.stride_w);
  KILN_CHECK(g.dilation_h > 0 && g.dilation_w > 0, op, ": dilation must be positive, got ", g.dilation_h, " x ",
             g.dilation_w);
  KILN_CHECK(g.pad_h >= 0 && g.pad_w >= 0, op, ": padding must be non-negative, got ", g.pad_h, " x ", g.pad_w);
  // Checked on the extents rather than on out_h()/out_w(): C++ division
  // truncates toward zero, so a kernel one step too large would still give
  // an output size of 1.
  int64_t extent_h = g.dilation_h * (g.kernel_h - 1) + 1;
  int64_t extent_w = g.dilation_w * (g.kernel_w - 1) + 1;
  KILN_CHECK(extent_h <= g.height + 2 * g.pad_h && extent_w <= g.width + 2 * g.pad_w, op, ": kernel ", g.kernel_h,
             " x ", g.kernel_w, " with dilation ", g.dilation_h, " x ", g.dilation_w, " spans ", extent_h, " x ",
             extent_w, ", more than the padded input ", g.height + 2 * g.pad_h, " x ", g.width + 2 * g.pad_w,
             " (output size would be < 1)");
}

Tensor im2col(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride, int64_t padding,
              int64_t dilation) {
  KILN_CHECK(x.defined(), "im2col: x is undefined");
  KILN_CHECK(x.dim() == 4, "im2col: expected a 4-d input (N, C, H, W), got shape ", x.shape());
  ConvGeometry g{x.size(1), x.size(2), x.size(3), kernel_h, kernel_w};
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = padding;
  g.dilation_h = g.dilation_w = dilation;
  return im2col(x, g);
}

Tensor im2col(const Tensor& x, const ConvGeometry& g) {
  KILN_CHECK(x.defined(), "im2col: x is undefined");
  KILN_CHECK(x.dim() == 4, "im2col: expected a 4-d input (N, C, H, W), got shape ", x.shape());
  KILN_CHECK(x.size(1) == g.channels && x.size(2) == g.height && x.size(3) == g.width, "im2col: input shape ",
             x.shape(), " does not match the geometry's (C, H, W) = (", g.channels, ", ", g.height, ", ", g.width,
             ")");
  check_geometry(g, "im2col");
  // cols: (N, C*kh*kw, oh*ow)
  Tensor cols = Tensor::empty({x.size(0), g.channels * g.kernel_h * g.kernel_w, g.out_h() * g.out_w()},
                              {x.dtype(), x.device()});
  if (cols.numel() > 0) backend_for(x.device()).im2col(cols, x, g);
  return cols;
}

Tensor col2im(const Tensor& cols, const ConvGeometry& g) {
  KILN_CHECK(cols.defined(), "col2im: cols is undefined");
  check_geometry(g, "col2im");
  int64_t rows = g.channels * g.kernel_h * g.kernel_w;
  int64_t positions = g.out_h() * g.out_w();
  KILN_CHECK(cols.dim() == 3 && cols.size(1) == rows && cols.size(2) == positions,
             "col2im: expected cols of shape [N, ", rows, ", ", positions, "] (C*kh*kw, oh*ow) for the geometry, got ",
             cols.shape());
  // x: (N, C, H, W)
  Tensor x = Tensor::empty({cols.size(0), g.channels, g.height, g.width}, {cols.dtype(), cols.device()});
  if (x.numel() > 0) backend_for(cols.device()).col2im(x, cols, g);
  return x;
}

// ---- conv2d -------------------------------------------------------------------

ConvGeometry conv2d_group_geometry(const Tensor& x, const Tensor& weight, const Conv2dParams& p, std::string_view op) {
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
  ConvGeometry g{weight.size(1), x.size(-2), x.size(-1), weight.size(2), weight.size(3)};
  g.stride_h = p.stride_h, g.stride_w = p.stride_w;
  g.pad_h = p.pad_h, g.pad_w = p.pad_w;
  g.dilation_h = p.dilation_h, g.dilation_w = p.dilation_w;
  check_geometry(g, op);
  return g;
}

namespace {

// Checks x and weight against each other and p, and returns the geometry of
// one group (channels = C / groups). `op` names the caller.
ConvGeometry conv2d_geometry(const Tensor& x, const Tensor& weight, const Conv2dParams& p, std::string_view op) {
  KILN_CHECK(x.defined() && weight.defined(), op, ": x or weight is undefined");
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape ",
             x.shape());
  KILN_CHECK(weight.dim() == 4, op, ": expected a 4-d weight (OC, C/groups, kh, kw), got shape ", weight.shape());
  KILN_CHECK(x.dtype() == weight.dtype(), op, ": expected x and weight of one dtype, got ", x.dtype(), " and ",
             weight.dtype());
  KILN_CHECK(x.is_floating_point(), op, ": expected floating point tensors, got ", x.dtype());
  KILN_CHECK(x.device() == weight.device(), op, ": expected x and weight on one device, got ", x.device(), " and ",
             weight.device());
  return conv2d_group_geometry(x, weight, p, op);
}

// The dtype the kernels of x's backend run in: the dtype itself when the
// backend takes it, else float32 (16-bit floats on the CPU, whose GEMM
// accumulates in float32 without losing the products' precision).
DType compute_dtype(const Tensor& x) {
  return backend_for(x.device()).conv2d_takes(x.dtype()) ? x.dtype() : DType::Float32;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const ConvGeometry g = conv2d_geometry(x, weight, p, "conv2d");
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
  Tensor w2 = weight.to(compute).reshape({out_channels, g.channels * g.kernel_h * g.kernel_w});
  Tensor b = bias.defined() ? bias.to(compute) : Tensor();
  Tensor out = Tensor::empty({x4.size(0), out_channels, g.out_h(), g.out_w()}, {compute, x.device()});
  if (out.numel() > 0) {
    Backend& backend = backend_for(x.device());
    for (int64_t group = 0; group < p.groups; ++group) {
      const int64_t c0 = group * g.channels, o0 = group * group_out;
      backend.conv2d(out.slice(1, o0, o0 + group_out), x4.slice(1, c0, c0 + g.channels),
                     w2.slice(0, o0, o0 + group_out), b.defined() ? b.slice(0, o0, o0 + group_out) : Tensor(), g);
    }
  }
  out = out.to(x.dtype());
  return unbatched ? out.squeeze(0) : out;
}

Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                            std::array<bool, 3> output_mask) {
  const ConvGeometry g = conv2d_geometry(x, weight, p, "conv2d_backward");
  const int64_t out_channels = weight.size(0), group_out = out_channels / p.groups;
  const bool unbatched = x.dim() == 3;
  KILN_CHECK(grad_out.defined(), "conv2d_backward: grad_out is undefined");
  Shape out_shape{out_channels, g.out_h(), g.out_w()};
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
  const int64_t ckk = g.channels * g.kernel_h * g.kernel_w;
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
      const int64_t c0 = group * g.channels, o0 = group * group_out;
      backend.conv2d_backward(slice_or_undefined(grad_input, 1, c0, g.channels),
                              slice_or_undefined(grad_weight, 0, o0, group_out),
                              slice_or_undefined(grad_bias, 0, o0, group_out), go.slice(1, o0, o0 + group_out),
                              x4.slice(1, c0, c0 + g.channels), w2.slice(0, o0, o0 + group_out), g);
    }
  }

  Conv2dGrads grads;
  if (grad_input.defined()) grads.grad_input = (unbatched ? grad_input.squeeze(0) : grad_input).to(x.dtype());
  if (grad_weight.defined()) grads.grad_weight = grad_weight.view(weight.shape()).to(x.dtype());
  if (grad_bias.defined()) grads.grad_bias = grad_bias.to(x.dtype());
  return grads;
}

}  // namespace kiln::ops
