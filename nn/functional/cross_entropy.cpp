// cross_entropy: one node with a fused backward for class-index targets (it
// runs in every classification training step), and a composition of
// differentiable ops for probability targets.
//
// For row n with target t (kept), class weights w (all ones when unweighted,
// W = sum_c w_c), smoothing s and p = softmax(x_n) (Note [Class-index losses]
// in nn/functional.h):
//   l_n = (1 - s) * w_t * (-logp_t) + s/C * sum_c w_c * (-logp_c)
// and since d(-logp_c)/dx_j = p_j - [c == j],
//   dl_n/dx_j = p_j * a_n - (1 - s) * w_t * [j == t] - s/C * w_j,
//   a_n = (1 - s) * w_t + s/C * W
// which is p - onehot(t) when unweighted and unsmoothed. The backward builds
// exactly that from p, a scatter at t and (when smoothing) one broadcast.
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/functional/class_targets.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// Soft labels: target (input's shape) holds class probabilities.
Tensor cross_entropy_probabilities(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  KILN_CHECK(input.is_floating_point(), "cross_entropy: expected a floating input, got ", input.dtype());
  KILN_CHECK(input.dim() >= 1,
             "cross_entropy: expected input of shape (N, C), (C) or (N, C, d1, ...), got a 0-dim tensor");
  KILN_CHECK(target.shape() == input.shape(),
             "cross_entropy: a floating target holds class probabilities and must have the input's shape ",
             input.shape(), ", got ", target.shape());
  KILN_CHECK(options.ignore_index < 0, "cross_entropy: ignore_index (", options.ignore_index,
             ") is not supported with class-probability targets");
  const int64_t class_dim = input.dim() == 1 ? 0 : 1, classes = input.size(class_dim);
  const double s = options.label_smoothing;
  Tensor y = s > 0 ? kiln::add(kiln::mul(target, 1.0 - s), s / static_cast<double>(classes)) : target;
  Tensor terms = kiln::mul(kiln::log_softmax(input, class_dim), y);
  if (options.weight.defined()) {
    KILN_CHECK(options.weight.dim() == 1 && options.weight.size(0) == classes,
               "cross_entropy: weight must have shape (", classes, ") for ", classes, " classes, got ",
               options.weight.shape());
    Shape channel_shape(input.dim(), 1);
    channel_shape[class_dim] = classes;
    terms = kiln::mul(terms, options.weight.view(channel_shape));
  }
  Tensor losses = kiln::neg(kiln::sum(terms, {class_dim}));  // input's shape without the class dim
  return detail::reduce_loss(losses, options.reduction);
}

// What the class-index backward keeps: the logits and the per-row
// constants of the formula above, all (M) unless noted.
struct CrossEntropySaved {
  SavedTensor x;         // (M, C) logits
  Tensor target;         // (M, 1) Int64, ignored rows pointing at class 0
  Tensor target_weight;  // w_t, 0 on ignored rows
  Tensor valid;          // 1 on kept rows, 0 on ignored ones
  Tensor weight;         // (C) or undefined
  Tensor row_scale;      // a_n, 0 on ignored rows
  Tensor denominator;    // 0-dim total weight, for the mean
  Reduction reduction;
  double s, classes;
};

Tensor cross_entropy_backward(const Tensor& grad_out, const CrossEntropySaved& saved) {
  const int64_t rows = saved.target.size(0);
  const double s = saved.s;
  // upstream: (M), the gradient reaching each row's loss.
  Tensor upstream = saved.reduction == Reduction::None  ? grad_out.reshape({rows})
                    : saved.reduction == Reduction::Sum ? grad_out.expand({rows})
                                                        : kiln::div(grad_out, saved.denominator).expand({rows});
  // The terms of the formula, scaled by upstream: a_n (M, 1), -(1 - s) * w_t
  // at column t (M, 1), and s/C * w_j on kept rows ((M, 1), or (M, C) when
  // weighted).
  Tensor scale = kiln::mul(upstream, saved.row_scale).unsqueeze(1);
  Tensor at_target = kiln::mul(upstream, ops::mul(saved.target_weight, s - 1.0)).unsqueeze(1);
  Tensor smooth;
  if (s > 0) {
    smooth = kiln::mul(upstream, ops::mul(saved.valid, s / saved.classes)).unsqueeze(1);
    if (saved.weight.defined()) smooth = kiln::mul(smooth, saved.weight);
  }
  if (!GradMode::is_enabled()) {
    // Ordinary training: the softmax is a fresh buffer this node owns, so the
    // other terms go into it in place, with no further (M, C) copies.
    Tensor grad = ops::softmax(saved.x.get(), 1);
    ops::mul_(grad, scale);
    ops::scatter_add_(grad, 1, saved.target, at_target);
    if (smooth.defined()) ops::sub_(grad, smooth);
    return grad;
  }
  // The backward is being recorded (create_graph): the same in differentiable
  // ops, with p computed from x so that it carries x's history.
  Tensor grad = kiln::mul(kiln::softmax(saved.x.get(), 1), scale);
  grad = kiln::scatter_add(grad, 1, saved.target, at_target);
  return smooth.defined() ? kiln::sub(grad, smooth) : grad;
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  if (auto c = autograd::autocast_float32(input, target, options.weight)) {
    CrossEntropyOptions cast = options;
    cast.weight = (*c)[2];
    return cross_entropy((*c)[0], (*c)[1], cast);
  }
  const double s = options.label_smoothing;
  KILN_CHECK(s >= 0.0 && s <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ", s);
  KILN_CHECK(input.defined() && target.defined(), "cross_entropy: input or target is undefined");
  if (target.is_floating_point()) return cross_entropy_probabilities(input, target, options);

  detail::ClassTargets t =
      detail::flatten_class_targets("cross_entropy", input, target, options.weight, options.ignore_index);
  const Tensor& x = t.input;  // (M, C)
  const double c = static_cast<double>(t.classes);

  Tensor logp = ops::log_softmax(x, 1);                                    // (M, C)
  Tensor picked = ops::gather(logp, 1, t.target.unsqueeze(1)).squeeze(1);  // (M)
  Tensor losses = ops::mul(ops::neg(picked), t.target_weight);             // (M)
  if (s > 0) {
    // sum_c w_c * (-logp_c), zero for ignored rows.
    Tensor all_classes = ops::sum(t.weight.defined() ? ops::mul(logp, t.weight) : logp, {1});  // (M)
    losses = ops::add(ops::mul(losses, 1.0 - s), ops::mul(ops::mul(all_classes, t.valid), -s / c));
  }
  // The mean divides by the kept targets' total weight, kept as a tensor so
  // that the division needs no value back from the device.
  Tensor denominator = options.reduction == Reduction::Mean ? ops::sum(t.target_weight) : Tensor();
  Tensor out = options.reduction == Reduction::None  ? losses.view(t.target_shape)
               : options.reduction == Reduction::Sum ? ops::sum(losses)
                                                     : ops::div(ops::sum(losses), denominator);
  if (!autograd::needs_grad({x})) return out;

  // a_n = (1 - s) * w_t + s/C * W on kept rows; s/C * W is s when unweighted.
  Tensor row_scale = t.target_weight;
  if (s > 0) {
    Tensor smooth_part =
        t.weight.defined() ? ops::mul(t.valid, ops::mul(ops::sum(t.weight), s / c)) : ops::mul(t.valid, s);
    row_scale = ops::add(ops::mul(t.target_weight, 1.0 - s), smooth_part);
  }
  CrossEntropySaved saved{.x = SavedTensor(x),
                          .target = t.target.unsqueeze(1),
                          .target_weight = t.target_weight,
                          .valid = t.valid,
                          .weight = t.weight,
                          .row_scale = row_scale,
                          .denominator = denominator,
                          .reduction = options.reduction,
                          .s = s,
                          .classes = c};
  autograd::record("cross_entropy", {x}, {out}, [saved = std::move(saved)](const TensorList& g) -> TensorList {
    return {cross_entropy_backward(g[0], saved)};
  });
  return out;
}

}  // namespace kiln::nn::functional
