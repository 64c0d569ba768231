// batch_norm and layer_norm. The backward runs the tensor layer's kernel, or
// the same formulas in differentiable ops when the backward itself is being
// recorded (Note [Backward kernels and double backward] in nn/functional.h).
// With xhat = (x - mean) * invstd and gy = grad_out * weight, both norms
// have, over the dims D their statistics are taken on,
//   grad_x = invstd * (gy - mean_D(gy) - xhat * mean_D(gy * xhat))
// (the statistics' own dependence on x gives the two mean terms), and
//   grad_weight = sum(grad_out * xhat), grad_bias = sum(grad_out)
// over the other dims.
#include <array>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// grad_x from the formula above; `mean` and `invstd` broadcast against x.
Tensor normalized_input_grad(const Tensor& gy, const Tensor& xhat, const Tensor& invstd, const Shape& dims) {
  Tensor centred = kiln::sub(gy, kiln::mean(gy, dims, /*keepdim=*/true));
  return kiln::mul(invstd, kiln::sub(centred, kiln::mul(xhat, kiln::mean(kiln::mul(gy, xhat), dims, true))));
}

// Sums over `dims`; no dims means nothing to sum (kiln::sum would take all).
Tensor sum_over(const Tensor& t, const Shape& dims) { return dims.empty() ? t : kiln::sum(t, dims); }

// The batch statistics of x over `dims`, as differentiable functions of x:
// the biased variance, as the forward normalises with.
std::pair<Tensor, Tensor> mean_and_invstd(const Tensor& x, const Shape& dims, double eps) {
  Tensor mean = kiln::mean(x, dims, /*keepdim=*/true);
  Tensor centred = kiln::sub(x, mean);
  Tensor var = kiln::mean(kiln::mul(centred, centred), dims, true);
  return {mean, kiln::rsqrt(kiln::add(var, eps))};
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  KILN_CHECK(x.dim() >= 2, "batch_norm: expected x of shape (N, C, *), got ", x.shape());
  const int64_t channels = x.size(1);
  KILN_CHECK(!training || x.numel() / channels > 1,
             "batch_norm: expected more than 1 value per channel when training, got x of shape ", x.shape());
  ops::BatchNormResult r = autograd::untracked(
      [&] { return ops::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps); });
  if (!autograd::needs_grad({x, weight, bias})) return r.output;

  const std::array<bool, 3> mask{x.requires_grad(), weight.defined() && weight.requires_grad(),
                                 bias.defined() && bias.requires_grad()};
  autograd::record("batch_norm", {x, weight, bias}, {r.output},
                   [x = SavedTensor(x), w = SavedTensor(weight), mean = SavedTensor(r.save_mean),
                    invstd = SavedTensor(r.save_invstd), training, eps, mask](const TensorList& g) -> TensorList {
                     const Tensor &xv = x.get(), &wv = w.get();
                     if (!GradMode::is_enabled()) {
                       ops::BatchNormGrads grads =
                           ops::batch_norm_backward(g[0], xv, wv, mean.get(), invstd.get(), training, mask);
                       return {grads.grad_input, grads.grad_weight, grads.grad_bias};
                     }
                     // (1, C, 1, ...): per-channel values broadcast against x.
                     Shape channel_shape(xv.dim(), 1);
                     channel_shape[1] = -1;
                     Shape dims{0};
                     for (int64_t d = 2; d < xv.dim(); ++d) dims.push_back(d);
                     Tensor mean_c, invstd_c;
                     if (training) {
                       std::tie(mean_c, invstd_c) = mean_and_invstd(xv, dims, eps);
                     } else {  // eval: the running statistics are constants
                       mean_c = mean.get().view(channel_shape);
                       invstd_c = invstd.get().view(channel_shape);
                     }
                     Tensor xhat = kiln::mul(kiln::sub(xv, mean_c), invstd_c);
                     Tensor gy = wv.defined() ? kiln::mul(g[0], wv.view(channel_shape)) : g[0];
                     Tensor gx;
                     if (mask[0]) {
                       gx = training ? normalized_input_grad(gy, xhat, invstd_c, dims) : kiln::mul(gy, invstd_c);
                       gx = gx.to(xv.dtype());
                     }
                     Tensor gw = mask[1] ? kiln::sum(kiln::mul(g[0], xhat), dims) : Tensor();
                     Tensor gb = mask[2] ? kiln::sum(g[0], dims) : Tensor();
                     return {gx, gw, gb};
                   });
  return r.output;
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (auto c = autograd::autocast_float32(x, weight, bias))
    return layer_norm((*c)[0], normalized_shape, (*c)[1], (*c)[2], eps);
  ops::LayerNormResult r = autograd::untracked([&] { return ops::layer_norm(x, normalized_shape, weight, bias, eps); });
  if (!autograd::needs_grad({x, weight, bias})) return r.output;

  const std::array<bool, 3> mask{x.requires_grad(), weight.defined() && weight.requires_grad(),
                                 bias.defined() && bias.requires_grad()};
  autograd::record("layer_norm", {x, weight, bias}, {r.output},
                   [x = SavedTensor(x), w = SavedTensor(weight), mean = SavedTensor(r.mean), rstd = SavedTensor(r.rstd),
                    normalized_shape, eps, mask](const TensorList& g) -> TensorList {
                     const Tensor &xv = x.get(), &wv = w.get();
                     if (!GradMode::is_enabled()) {
                       ops::LayerNormGrads grads =
                           ops::layer_norm_backward(g[0], xv, normalized_shape, mean.get(), rstd.get(), wv, mask);
                       return {grads.grad_input, grads.grad_weight, grads.grad_bias};
                     }
                     // Statistics over the trailing dims, parameter gradients over the leading ones.
                     const int64_t lead = xv.dim() - static_cast<int64_t>(normalized_shape.size());
                     Shape norm_dims, lead_dims;
                     for (int64_t d = 0; d < xv.dim(); ++d) (d < lead ? lead_dims : norm_dims).push_back(d);
                     auto [mean_x, rstd_x] = mean_and_invstd(xv, norm_dims, eps);
                     Tensor xhat = kiln::mul(kiln::sub(xv, mean_x), rstd_x);
                     Tensor gy = wv.defined() ? kiln::mul(g[0], wv) : g[0];
                     Tensor gx = mask[0] ? normalized_input_grad(gy, xhat, rstd_x, norm_dims).to(xv.dtype()) : Tensor();
                     Tensor gw = mask[1] ? sum_over(kiln::mul(g[0], xhat), lead_dims) : Tensor();
                     Tensor gb = mask[2] ? sum_over(g[0], lead_dims) : Tensor();
                     return {gx, gw, gb};
                   });
  return r.output;
}

}  // namespace kiln::nn::functional
