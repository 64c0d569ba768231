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
// which is p - onehot(t) when unweighted and unsmoothed. Forward and
// backward each run as one fused pass over the rows (ops::cross_entropy_rows,
// Note [Fused cross entropy] in tensor/cross_entropy.h); a backward that is
// itself recorded (create_graph) builds the same from differentiable ops:
// p, a scatter at t and (when smoothing) one broadcast.
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/functional/class_targets.h"
#include "tensor/cross_entropy.h"

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

// What the class-index backward keeps.
// target and weight may be views of the caller's tensors: saved with their
// versions, so that changing them in place before backward is an error
// rather than a silently different gradient.
struct CrossEntropySaved {
  SavedTensor x;       // (M, C) logits
  SavedTensor target;  // (M) Int64, ignored entries included
  SavedTensor weight;  // (C) or undefined
  Tensor denominator;  // 0-dim total weight, for the mean
  Reduction reduction;
  int64_t ignore_index;
  double s;
};

// The backward recorded as differentiable ops (create_graph), with p
// computed from x so that it carries x's history.
Tensor cross_entropy_backward_recorded(const Tensor& grad_out, const CrossEntropySaved& saved) {
  const Tensor x = saved.x.get();
  detail::ClassTargets t;
  t.input = x;
  t.target = saved.target.get();
  t.weight = saved.weight.get();
  t.classes = x.size(1);
  detail::mask_ignored_targets(t, "cross_entropy", saved.ignore_index);
  const int64_t rows = t.target.size(0);
  const double s = saved.s, c = static_cast<double>(t.classes);
  // upstream: (M), the gradient reaching each row's loss.
  Tensor upstream = saved.reduction == Reduction::None  ? grad_out.reshape({rows})
                    : saved.reduction == Reduction::Sum ? grad_out.expand({rows})
                                                        : kiln::div(grad_out, saved.denominator).expand({rows});
  // The terms of the formula: a_n (M, 1), -(1 - s) * w_t at column t
  // (M, 1), and s/C * w_j on kept rows ((M, 1), or (M, C) when weighted).
  Tensor row_scale = t.target_weight;
  if (s > 0) {
    Tensor smooth_part =
        t.weight.defined() ? ops::mul(t.valid, ops::mul(ops::sum(t.weight), s / c)) : ops::mul(t.valid, s);
    row_scale = ops::add(ops::mul(t.target_weight, 1.0 - s), smooth_part);
  }
  Tensor scale = kiln::mul(upstream, row_scale).unsqueeze(1);
  Tensor at_target = kiln::mul(upstream, ops::mul(t.target_weight, s - 1.0)).unsqueeze(1);
  Tensor grad = kiln::mul(kiln::softmax(x, 1), scale);
  grad = kiln::scatter_add(grad, 1, t.target.unsqueeze(1), at_target);
  if (s > 0) {
    Tensor smooth = kiln::mul(upstream, ops::mul(t.valid, s / c)).unsqueeze(1);
    if (t.weight.defined()) smooth = kiln::mul(smooth, t.weight);
    grad = kiln::sub(grad, smooth);
  }
  return grad;
}

Tensor cross_entropy_backward(const Tensor& grad_out, const CrossEntropySaved& saved) {
  if (GradMode::is_enabled()) return cross_entropy_backward_recorded(grad_out, saved);
  // Ordinary training: one fused pass (Note [Fused cross entropy]). A
  // gradient handed to backward() in another dtype is converted, as the
  // ops of a composite backward would promote it.
  const Tensor x = saved.x.get();
  const Tensor g = grad_out.to(x.dtype());
  const Tensor upstream = saved.reduction == Reduction::None ? g.reshape({x.size(0)}) : g;
  return ops::cross_entropy_rows_backward(upstream, saved.denominator, x, saved.target.get(), saved.weight.get(),
                                          saved.ignore_index, saved.s);
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

  detail::ClassTargets t = detail::flatten_class_operands("cross_entropy", input, target, options.weight);
  const Tensor& x = t.input;  // (M, C)
  const int64_t ignore_index = options.ignore_index;
  ops::CrossEntropyRows rows = autograd::untracked([&] {
    return ops::cross_entropy_rows(x, t.target, t.weight, ignore_index, s, [classes = t.classes, ignore_index](int64_t v) {
      return detail::target_out_of_range("cross_entropy", v, classes, ignore_index);
    });
  });
  // The mean divides by the kept targets' total weight, kept as a tensor so
  // that the division needs no value back from the device. One sum gives
  // both totals: the losses' and the weights'.
  Tensor denominator, out;
  if (options.reduction == Reduction::Mean) {
    const Tensor totals = ops::sum(rows.stacked, {1});  // (2)
    denominator = totals.select(0, 1);
    out = ops::div(totals.select(0, 0), denominator);
  } else {
    out = options.reduction == Reduction::Sum ? ops::sum(rows.losses) : rows.losses.view(t.target_shape);
  }
  if (!autograd::needs_grad({x})) return out;

  CrossEntropySaved saved{.x = SavedTensor(x),
                          .target = SavedTensor(t.target),
                          .weight = SavedTensor(t.weight),
                          .denominator = denominator,
                          .reduction = options.reduction,
                          .ignore_index = ignore_index,
                          .s = s};
  autograd::record("cross_entropy", {x}, {out}, [saved = std::move(saved)](const TensorList& g) -> TensorList {
    return {cross_entropy_backward(g[0], saved)};
  });
  return out;
}

}  // namespace kiln::nn::functional
