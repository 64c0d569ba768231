// The losses other than cross_entropy, composed of differentiable ops (their
// backward is then the chain of those ops' backwards), and the class-target
// handling they share with cross_entropy.
#include <string>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/functional/class_targets.h"
#include "tensor/index.h"

namespace kiln::nn::functional {

namespace detail {

std::string target_out_of_range(std::string_view op, int64_t v, int64_t classes, int64_t ignore_index) {
  return kiln::detail::str(op, ": target ", v, " is out of bounds for ", classes, " classes (and is not ignore_index = ",
                           ignore_index, ")");
}

ClassTargets flatten_class_targets(std::string_view op, const Tensor& input, const Tensor& target, const Tensor& weight,
                                   int64_t ignore_index) {
  ClassTargets t = flatten_class_operands(op, input, target, weight);
  mask_ignored_targets(t, op, ignore_index);
  return t;
}

ClassTargets flatten_class_operands(std::string_view op, const Tensor& input, const Tensor& target,
                                    const Tensor& weight) {
  KILN_CHECK(input.defined() && target.defined(), op, ": input or target is undefined");
  KILN_CHECK(input.is_floating_point(), op, ": expected a floating input, got ", input.dtype());
  KILN_CHECK(input.dim() >= 1, op, ": expected input of shape (N, C), (C) or (N, C, d1, ...), got a 0-dim tensor");
  KILN_CHECK(target.dtype() == DType::Int64, op, ": expected target class indices of dtype int64, got ",
             target.dtype());
  KILN_CHECK(target.device() == input.device(), op, ": input is on ", input.device(), " but target is on ",
             target.device());
  const int64_t classes = input.dim() == 1 ? input.size(0) : input.size(1);
  // The target has the input's shape without the class dim.
  Shape expected = input.shape();
  expected.erase(expected.begin() + (input.dim() == 1 ? 0 : 1));
  KILN_CHECK(target.shape() == expected, op, ": input of shape ", input.shape(), " needs a target of shape ", expected,
             ", got ", target.shape());

  ClassTargets t;
  t.classes = classes;
  t.target_shape = target.shape();
  if (input.dim() <= 2) {
    t.input = input.dim() == 1 ? input.unsqueeze(0) : input;
  } else {  // (N, C, d1, ...) -> (N, d1, ..., C) -> (M, C)
    Shape order{0};
    for (int64_t d = 2; d < input.dim(); ++d) order.push_back(d);
    order.push_back(1);
    t.input = input.permute(order).reshape({-1, classes});
  }
  t.target = target.reshape({-1});  // (M)
  if (weight.defined()) {
    KILN_CHECK(weight.dim() == 1 && weight.size(0) == classes, op, ": weight must have shape (", classes, ") for ",
               classes, " classes, got ", weight.shape());
    KILN_CHECK(weight.device() == input.device(), op, ": input is on ", input.device(), " but weight is on ",
               weight.device());
    KILN_CHECK(!(weight.requires_grad() && GradMode::is_enabled()), op,
               ": weight requires grad, but the loss has no gradient with respect to its class weights (as "
               "torch); pass weight.detach()");
    t.weight = weight.to(input.dtype());
  }
  return t;
}

void mask_ignored_targets(ClassTargets& t, std::string_view op, int64_t ignore_index) {
  const Tensor flat = t.target;  // (M)
  Tensor kept = ops::ne(flat, ignore_index);
  t.target = ops::where(kept, flat, 0);
  // On a GPU the error comes when the host next waits for it (Note [CUDA
  // kernel errors]); gather's kernel skips a bad target meanwhile.
  ops::check_index_range(t.target, t.classes,
                         [op = std::string(op), classes = t.classes, ignore_index](int64_t v) {
                           return target_out_of_range(op, v, classes, ignore_index);
                         });
  t.valid = kept.to(t.input.dtype());
  t.target_weight = t.weight.defined() ? ops::mul(ops::index_select(t.weight, 0, t.target), t.valid) : t.valid;
}

Tensor reduce_loss(const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return losses;
    case Reduction::Sum:
      return kiln::sum(losses);
    case Reduction::Mean:
      return kiln::mean(losses);
  }
  KILN_CHECK(false, "reduce_loss: unknown reduction ", static_cast<int>(reduction));
  return Tensor();
}

}  // namespace detail

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options) {
  if (auto c = autograd::autocast_float32(input, options.weight)) {
    NLLLossOptions cast = options;
    cast.weight = (*c)[1];
    return nll_loss((*c)[0], target, cast);
  }
  detail::ClassTargets t =
      detail::flatten_class_targets("nll_loss", input, target, options.weight, options.ignore_index);
  // picked: (M), input[m, target[m]]
  Tensor picked = kiln::gather(t.input, 1, t.target.unsqueeze(1)).squeeze(1);
  Tensor losses = kiln::mul(kiln::neg(picked), t.target_weight);  // (M), 0 where ignored
  switch (options.reduction) {
    case Reduction::None:
      return losses.reshape(t.target_shape);
    case Reduction::Sum:
      return kiln::sum(losses);
    case Reduction::Mean:
      // Divided by the total weight of the targets kept (Note [Class-index losses]).
      return kiln::div(kiln::sum(losses), ops::sum(t.target_weight));
  }
  return Tensor();
}

static void check_same_shape(std::string_view op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(input.defined() && target.defined(), op, ": input or target is undefined");
  KILN_CHECK(input.shape() == target.shape(), op, ": input of shape ", input.shape(), " and target of shape ",
             target.shape(), " differ; the loss compares them element by element (reshape one of them)");
  KILN_CHECK(input.is_floating_point() && target.is_floating_point(), op, ": expected floating input and target, got ",
             input.dtype(), " and ", target.dtype());
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto c = autograd::autocast_float32(input, target)) return mse_loss((*c)[0], (*c)[1], reduction);
  check_same_shape("mse_loss", input, target);
  Tensor diff = kiln::sub(input, target);
  return detail::reduce_loss(kiln::mul(diff, diff), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto c = autograd::autocast_float32(input, target)) return l1_loss((*c)[0], (*c)[1], reduction);
  check_same_shape("l1_loss", input, target);
  return detail::reduce_loss(kiln::abs(kiln::sub(input, target)), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options) {
  if (auto c = autograd::autocast_float32(input, target, options.weight, options.pos_weight)) {
    BCEWithLogitsOptions cast = options;
    cast.weight = (*c)[2];
    cast.pos_weight = (*c)[3];
    return binary_cross_entropy_with_logits((*c)[0], (*c)[1], cast);
  }
  check_same_shape("binary_cross_entropy_with_logits", input, target);
  // softplus(-x) = log(1 + exp(-x)) as m + log(exp(-m) + exp(-x - m)) with
  // m = max(-x, 0): both exponents are <= 0, so nothing overflows, and the
  // gradient through m cancels exactly, leaving -sigmoid(-x) for any x
  // (torch's formulation).
  Tensor m = kiln::relu(kiln::neg(input));
  Tensor softplus_neg =
      kiln::add(m, kiln::log(kiln::add(kiln::exp(kiln::neg(m)), kiln::exp(kiln::sub(kiln::neg(input), m)))));
  Tensor positive_term = softplus_neg;
  if (options.pos_weight.defined()) {
    // log_weight = 1 + (pos_weight - 1) * y scales the -log(sigmoid(x)) part.
    Tensor log_weight = kiln::add(kiln::mul(kiln::sub(options.pos_weight, 1.0), target), 1.0);
    positive_term = kiln::mul(log_weight, softplus_neg);
  }
  // (1 - y) * x + softplus(-x) = y * softplus(-x) + (1 - y) * softplus(x).
  Tensor losses = kiln::add(kiln::mul(1.0 - target, input), positive_term);
  if (options.weight.defined()) losses = kiln::mul(losses, options.weight);
  KILN_CHECK(losses.shape() == input.shape(), "binary_cross_entropy_with_logits: weight ",
             options.weight.defined() ? options.weight.shape() : Shape{}, " and pos_weight ",
             options.pos_weight.defined() ? options.pos_weight.shape() : Shape{},
             " must broadcast to the input's shape ", input.shape());
  return detail::reduce_loss(losses, options.reduction);
}

}  // namespace kiln::nn::functional
