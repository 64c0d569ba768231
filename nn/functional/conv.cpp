// conv2d and its backward, each a recorded op, so that gradients of any
// order flow (Note [Backward kernels and double backward] in nn/functional.h).
#include <array>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/engine.h"
#include "nn/functional.h"

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
                                                const ops::Conv2dParams& p, std::array<bool, 3> mask) {
  ops::Conv2dGrads grads = ops::conv2d_backward(g, x, w, p, mask);
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
        Size2d stride(p.stride_h, p.stride_w), padding(p.pad_h, p.pad_w), dilation(p.dilation_h, p.dilation_w);
        if (slot[0] >= 0) {  // grad_input = Bx(g, w)
          const Tensor& ggx = gg[slot[0]];
          accumulate(d_g, conv2d(ggx, wv, Tensor(), stride, padding, dilation, p.groups));
          d_w = differentiable_conv2d_backward(gv, ggx, wv, p, {false, true, false}).grad_weight;
        }
        if (slot[1] >= 0) {  // grad_weight = Bw(g, x)
          const Tensor& ggw = gg[slot[1]];
          accumulate(d_g, conv2d(xv, ggw, Tensor(), stride, padding, dilation, p.groups));
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

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride, Size2d padding, Size2d dilation,
              int64_t groups) {
  if (auto c = autograd::autocast_lower_precision(x, weight, bias))
    return conv2d((*c)[0], (*c)[1], (*c)[2], stride, padding, dilation, groups);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, "conv2d: expected x of shape (N, C, H, W) or (C, H, W), got ", x.shape());
  // The nodes below always see a batch; an unbatched x is a view of one.
  if (x.dim() == 3) return conv2d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0);

  const ops::Conv2dParams p{.stride_h = stride.h,
                            .stride_w = stride.w,
                            .pad_h = padding.h,
                            .pad_w = padding.w,
                            .dilation_h = dilation.h,
                            .dilation_w = dilation.w,
                            .groups = groups};
  Tensor out = ops::conv2d(x, weight, bias, p);  // (N, OC, oh, ow)
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

}  // namespace kiln::nn::functional
