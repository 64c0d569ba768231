// group_norm and instance_norm as compositions of the fused norms (Note
// [Composite layers] in nn/functional_composite.h): the statistics come from
// layer_norm's or batch_norm's kernel on a reshaped view of x, the affine
// from a broadcast multiply-add, and the gradient from their backwards.
#include <algorithm>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/functional_composite.h"

namespace kiln::nn::functional {

namespace {

// (1, C, 1, ...) of x's rank: a per-channel tensor broadcast against x.
Shape channel_shape(const Tensor& x) {
  Shape shape(x.dim(), 1);
  shape[1] = x.size(1);
  return shape;
}

// Checks that `t` is undefined or holds one value per channel.
void check_per_channel(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  KILN_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == x.size(1)), op, ": expected ", what, " of shape [",
             x.size(1), "] (one per channel of x of shape ", x.shape(), "), got ", t.shape());
}

// y * weight[c] + bias[c], each only when defined.
Tensor channel_affine(Tensor y, const Tensor& weight, const Tensor& bias) {
  const Shape shape = channel_shape(y);
  if (weight.defined()) y = kiln::mul(y, weight.view(shape));
  if (bias.defined()) y = kiln::add(y, bias.view(shape));
  return y;
}

}  // namespace

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  KILN_CHECK(x.dim() >= 2, "group_norm: expected x of shape (N, C, *), got ", x.shape());
  KILN_CHECK(num_groups > 0, "group_norm: num_groups must be positive, got ", num_groups);
  const int64_t n = x.size(0), channels = x.size(1);
  KILN_CHECK(channels % num_groups == 0, "group_norm: the ", channels, " channels of x of shape ", x.shape(),
             " are not divisible by num_groups (", num_groups, ")");
  check_per_channel("group_norm", "weight", weight, x);
  check_per_channel("group_norm", "bias", bias, x);
  // xg: (N, G, C/G * spatial); each row is one group of one sample.
  Tensor xg = x.reshape({n, num_groups, -1});
  Tensor y = layer_norm(xg, {xg.size(2)}, Tensor(), Tensor(), eps).reshape(x.shape());
  return channel_affine(y, weight, bias);
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  KILN_CHECK(x.dim() >= 3, "instance_norm: expected x of shape (N, C, *) with at least one spatial dim, got ",
             x.shape());
  const int64_t n = x.size(0), channels = x.size(1);
  KILN_CHECK(!use_input_stats || x.numel() / std::max<int64_t>(n * channels, 1) > 1,
             "instance_norm: expected more than 1 spatial element when using the input's statistics, got x of shape ",
             x.shape());
  KILN_CHECK(use_input_stats || (running_mean.defined() && running_var.defined()),
             "instance_norm: running_mean and running_var are required when use_input_stats is false");
  check_per_channel("instance_norm", "running_mean", running_mean, x);
  check_per_channel("instance_norm", "running_var", running_var, x);
  check_per_channel("instance_norm", "weight", weight, x);
  check_per_channel("instance_norm", "bias", bias, x);

  // As torch's instance_norm: every (sample, channel) plane is a channel of
  // one batch_norm over (1, N*C, *), whose running statistics are the
  // module's repeated N times; their update is then averaged over the batch.
  auto repeated = [&](const Tensor& stat) {
    return stat.defined() ? stat.unsqueeze(0).expand({n, channels}).contiguous().view({n * channels}) : Tensor();
  };
  Tensor mean_rep = repeated(running_mean), var_rep = repeated(running_var);  // (N*C)
  Shape planes = x.shape();
  planes[0] = 1;
  planes[1] = n * channels;
  Tensor y = batch_norm(x.reshape(planes), mean_rep, var_rep, Tensor(), Tensor(), use_input_stats, momentum, eps)
                 .reshape(x.shape());
  if (use_input_stats) {
    NoGradGuard no_grad;
    if (running_mean.defined()) Tensor(running_mean).copy_(ops::mean(mean_rep.view({n, channels}), {0}));
    if (running_var.defined()) Tensor(running_var).copy_(ops::mean(var_rep.view({n, channels}), {0}));
  }
  return channel_affine(y, weight, bias);
}

}  // namespace kiln::nn::functional
