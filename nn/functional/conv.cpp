// conv2d and its backward, each a recorded op, so that gradients of any
// order flow (Note [Backward kernels and double backward] in nn/functional.h),
// and conv_transpose2d, which is conv2d's input gradient run forward.
#include <array>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/engine.h"
#include "nn/functional.h"
#include "nn/functional_composite.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// The gradients of conv2d for the entries of `mask` = {input, weight, bias},
// as a differentiable op. Each gradient is linear in grad_out and in one
// other argument:
//   grad_input  = Bx(g, w)   the adjoint of x -> conv2d(x, w)
//   grad_weight = Bw(g, x)   the adjoint of w -> conv2d(x, w)
//   grad_bias   = sum of g over N, oh, ow
// so for upstream gradients (ggx, ggw, ggb) of those three results:
//   d/dg = conv2d(ggx, w) + conv2d(x, ggw) + ggb   (by adjointness)
//   d/dw = Bw(g, ggx)        d/dx = Bx(g, ggw)
// which are this function and conv2d again.
ops::Conv2dGrads differentiable_conv2d_backward(const Tensor& g, const Tensor& x, const Tensor& w,
                                                const Conv2dParams& p, std::array<bool, 3> mask) {
  ops::Conv2dGrads grads = autograd::untracked([&] { return ops::conv2d_backward(g, x, w, p, mask); });
  if (!autograd::needs_grad({g, x, w})) return grads;

  TensorList outputs;
  std::array<int, 3> slot{-1, -1, -1};  // which output each of grad_input, grad_weight, grad_bias is
  for (int i = 0; i < 3; ++i) {
    const Tensor& t = i == 0 ? grads.grad_input : i == 1 ? grads.grad_weight : grads.grad_bias;
    if (t.defined()) {
      slot[i] = static_cast<int>(outputs.size());
      outputs.push_back(t);
    }
  }
  autograd::record(
      "conv2d_backward", {g, x, w}, outputs,
      [g = SavedTensor(g), x = SavedTensor(x), w = SavedTensor(w), p, slot](const TensorList& gg) -> TensorList {
        const Tensor &gv = g.get(), &xv = x.get(), &wv = w.get();
        Tensor d_g, d_x, d_w;
        auto accumulate = [](Tensor& into, const Tensor& term) {
          into = into.defined() ? kiln::add(into, term) : term;
        };
        if (slot[0] >= 0) {  // grad_input = Bx(g, w)
          const Tensor& ggx = gg[slot[0]];
          accumulate(d_g, conv2d(ggx, wv, Tensor(), p));
          d_w = differentiable_conv2d_backward(gv, ggx, wv, p, {false, true, false}).grad_weight;
        }
        if (slot[1] >= 0) {  // grad_weight = Bw(g, x)
          const Tensor& ggw = gg[slot[1]];
          accumulate(d_g, conv2d(xv, ggw, Tensor(), p));
          d_x = differentiable_conv2d_backward(gv, xv, ggw, p, {true, false, false}).grad_input;
        }
        if (slot[2] >= 0) {  // grad_bias = sum(g): its gradient spreads over g
          accumulate(d_g, gg[slot[2]].view({1, -1, 1, 1}).expand(gv.shape()));
        }
        return {d_g, d_x, d_w};
      });
  return grads;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  if (auto c = autograd::autocast_lower_precision(x, weight, bias)) return conv2d((*c)[0], (*c)[1], (*c)[2], p);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, "conv2d: expected x of shape (N, C, H, W) or (C, H, W), got ", x.shape());
  // The nodes below always see a batch; an unbatched x is a view of one.
  if (x.dim() == 3) return conv2d(x.unsqueeze(0), weight, bias, p).squeeze(0);

  Tensor out = autograd::untracked([&] { return ops::conv2d(x, weight, bias, p); });  // (N, OC, oh, ow)
  if (autograd::needs_grad({x, weight, bias})) {
    const std::array<bool, 3> mask{x.requires_grad(), weight.requires_grad(), bias.defined() && bias.requires_grad()};
    autograd::record("conv2d", {x, weight, bias}, {out},
                     [x = SavedTensor(x), w = SavedTensor(weight), p, mask](const TensorList& g) -> TensorList {
                       // Only what the engine wants now (Note [Split backward]).
                       std::array<bool, 3> wanted = mask;
                       for (size_t i = 0; i < 3; ++i) wanted[i] = wanted[i] && autograd::input_gradient_wanted(i);
                       ops::Conv2dGrads grads = differentiable_conv2d_backward(g[0], x.get(), w.get(), p, wanted);
                       return {grads.grad_input, grads.grad_weight, grads.grad_bias};
                     });
  }
  return out;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride, Conv2dPadding padding,
              Size2d dilation, int64_t groups) {
  if (padding.kind() != ConvPaddingKind::Same)
    return conv2d(x, weight, bias,
                  {.stride = stride, .padding = padding.size(), .dilation = dilation, .groups = groups});
  KILN_CHECK(x.defined() && weight.defined(), "conv2d: x or weight is undefined");
  KILN_CHECK(weight.dim() == 4, "conv2d: expected a 4-d weight (OC, C/groups, kh, kw), got shape ", weight.shape());
  KILN_CHECK(stride == Size2d(1), "conv2d: padding='same' is not supported for strided convolutions, got stride (",
             stride.h, ", ", stride.w, ")");
  // The convolution pads the before sides; an uneven total pads the one
  // more after them first, with zeros (Note [Same padding] in nn/conv_padding.h).
  const auto [h, w] = conv_padding_sides(padding, {weight.size(2), weight.size(3)}, dilation);
  const Conv2dParams p{.stride = stride, .padding = {h.before, w.before}, .dilation = dilation, .groups = groups};
  if (h.after == h.before && w.after == w.before) return conv2d(x, weight, bias, p);
  return conv2d(functional::pad(x, {0, w.after - w.before, 0, h.after - h.before}), weight, bias, p);
}

// conv_transpose2d(x, w) is the adjoint of x -> conv2d(x, w): the gradient
// conv2d's backward gives its input for an upstream gradient x, where the
// weight (C_in, C_out / groups, kh, kw) reads as a conv2d weight with
// C_in output channels. So it is differentiable_conv2d_backward's
// grad_input, whose recorded node already differentiates it in x (conv2d
// of the gradient) and in the weight, to any order. The conv2d input it
// is the gradient of enters only through its shape: an expanded zero, no
// memory.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                        Size2d output_padding) {
  if (auto c = autograd::autocast_lower_precision(x, weight, bias))
    return conv_transpose2d((*c)[0], (*c)[1], (*c)[2], p, output_padding);
  KILN_CHECK(x.defined() && weight.defined(), "conv_transpose2d: x or weight is undefined");
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, "conv_transpose2d: expected x of shape (N, C_in, H, W) or (C_in, H, W), got ",
             x.shape());
  if (x.dim() == 3) return conv_transpose2d(x.unsqueeze(0), weight, bias, p, output_padding).squeeze(0);
  KILN_CHECK(weight.dim() == 4, "conv_transpose2d: expected a 4-d weight (C_in, C_out/groups, kh, kw), got shape ",
             weight.shape());
  KILN_CHECK(x.dtype() == weight.dtype() && x.device() == weight.device(),
             "conv_transpose2d: expected x and weight of one dtype and device, got ", x.dtype(), " on ", x.device(),
             " and ", weight.dtype(), " on ", weight.device());
  KILN_CHECK(x.is_floating_point(), "conv_transpose2d: expected floating point tensors, got ", x.dtype());
  KILN_CHECK(p.groups > 0, "conv_transpose2d: groups must be positive, got ", p.groups);
  KILN_CHECK(weight.size(0) % p.groups == 0, "conv_transpose2d: weight of shape ", weight.shape(), " has ",
             weight.size(0), " input channels, not divisible by groups=", p.groups);
  KILN_CHECK(x.size(1) == weight.size(0), "conv_transpose2d: input of shape ", x.shape(), " has ", x.size(1),
             " channels, but weight of shape ", weight.shape(), " expects ", weight.size(0));
  KILN_CHECK(p.stride.h > 0 && p.stride.w > 0 && p.dilation.h > 0 && p.dilation.w > 0,
             "conv_transpose2d: stride and dilation must be positive, got (", p.stride.h, ", ", p.stride.w, ") and (",
             p.dilation.h, ", ", p.dilation.w, ")");
  KILN_CHECK(p.padding.h >= 0 && p.padding.w >= 0, "conv_transpose2d: padding must be non-negative, got (", p.padding.h,
             ", ", p.padding.w, ")");
  // torch's rule: each output_padding below its stride or its dilation.
  KILN_CHECK(output_padding.h >= 0 && output_padding.w >= 0 &&
                 (output_padding.h < p.stride.h || output_padding.h < p.dilation.h) &&
                 (output_padding.w < p.stride.w || output_padding.w < p.dilation.w),
             "conv_transpose2d: output_padding (", output_padding.h, ", ", output_padding.w,
             ") must be smaller than either stride (", p.stride.h, ", ", p.stride.w, ") or dilation (", p.dilation.h,
             ", ", p.dilation.w, ")");
  const int64_t out_channels = weight.size(1) * p.groups;
  // out = (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
  const int64_t out_h =
      (x.size(2) - 1) * p.stride.h - 2 * p.padding.h + p.dilation.h * (weight.size(2) - 1) + output_padding.h + 1;
  const int64_t out_w =
      (x.size(3) - 1) * p.stride.w - 2 * p.padding.w + p.dilation.w * (weight.size(3) - 1) + output_padding.w + 1;
  KILN_CHECK(out_h > 0 && out_w > 0, "conv_transpose2d: input of shape ", x.shape(), " and weight of shape ",
             weight.shape(), " give an output of ", out_h, " x ", out_w, ", which is empty");
  // The conv2d input whose gradient this is: (N, C_out, out_h, out_w).
  Tensor shape_only = zeros({}, {x.dtype(), x.device()}).expand({x.size(0), out_channels, out_h, out_w});
  Tensor out = differentiable_conv2d_backward(x, shape_only, weight, p, {true, false, false}).grad_input;
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv_transpose2d: bias must have shape [",
               out_channels, "], got ", bias.shape());
    out = kiln::add(out, bias.view({1, out_channels, 1, 1}));
  }
  return out;
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride, Size2d padding,
                        Size2d output_padding, int64_t groups, Size2d dilation) {
  return conv_transpose2d(
      x, weight, bias, {.stride = stride, .padding = padding, .dilation = dilation, .groups = groups}, output_padding);
}

}  // namespace kiln::nn::functional
