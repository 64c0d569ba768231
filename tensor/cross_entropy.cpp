// Front-end of the fused class-index cross entropy (Note [Fused cross
// entropy] in tensor/cross_entropy.h): checks, contiguous operands, one
// dispatch per direction.
#include "tensor/cross_entropy.h"

#include "tensor/factory.h"

namespace kiln::ops {

namespace {

void check_operands(const Tensor& x, const Tensor& target, const Tensor& weight, double smoothing, const char* op) {
  KILN_CHECK(x.defined() && x.dim() == 2 && x.is_floating_point(), op, ": expected floating logits (M, C), got ",
             x.defined() ? detail::str(x.dtype(), " ", x.shape()) : std::string("an undefined tensor"));
  KILN_CHECK(target.defined() && target.dtype() == DType::Int64 && target.shape() == Shape{x.size(0)}, op,
             ": expected int64 targets of shape [", x.size(0), "], got ",
             target.defined() ? detail::str(target.dtype(), " ", target.shape()) : std::string("an undefined tensor"));
  KILN_CHECK(target.device() == x.device(), op, ": x is on ", x.device(), " but target is on ", target.device());
  if (weight.defined()) {
    KILN_CHECK(weight.shape() == Shape{x.size(1)} && weight.dtype() == x.dtype() && weight.device() == x.device(),
               op, ": expected class weights ", x.dtype(), " [", x.size(1), "] on ", x.device(), ", got ",
               weight.dtype(), " ", weight.shape(), " on ", weight.device());
  }
  KILN_CHECK(smoothing >= 0.0 && smoothing <= 1.0, op, ": smoothing must be in [0, 1], got ", smoothing);
}

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

}  // namespace

CrossEntropyRows cross_entropy_rows(const Tensor& x, const Tensor& target, const Tensor& weight,
                                    int64_t ignore_index, double smoothing, const IndexErrorMessage& message) {
  check_operands(x, target, weight, smoothing, "cross_entropy_rows");
  Tensor stacked = Tensor::empty({2, x.size(0)}, {x.dtype(), x.device()});
  CrossEntropyRows rows{stacked.select(0, 0), stacked.select(0, 1), stacked};
  if (x.size(0) == 0) return rows;
  KILN_CHECK(x.size(1) > 0, "cross_entropy_rows: ", x.size(0), " rows of 0 classes");
  backend_for(x.device())
      .cross_entropy(rows.losses, rows.target_weights, x.contiguous(), target.contiguous(),
                     contiguous_or_undefined(weight), ignore_index, smoothing, message);
  return rows;
}

Tensor cross_entropy_rows_backward(const Tensor& grad_out, const Tensor& denominator, const Tensor& x,
                                   const Tensor& target, const Tensor& weight, int64_t ignore_index,
                                   double smoothing) {
  const char* op = "cross_entropy_rows_backward";
  check_operands(x, target, weight, smoothing, op);
  KILN_CHECK(grad_out.defined() && grad_out.dtype() == x.dtype() && grad_out.device() == x.device() &&
                 (grad_out.dim() == 0 || grad_out.shape() == Shape{x.size(0)}),
             op, ": expected grad_out ", x.dtype(), " [] or [", x.size(0), "] on ", x.device(), ", got ",
             grad_out.defined() ? detail::str(grad_out.dtype(), " ", grad_out.shape(), " on ", grad_out.device())
                                : std::string("an undefined tensor"));
  KILN_CHECK(!denominator.defined() || (denominator.dim() == 0 && denominator.dtype() == x.dtype() &&
                                        denominator.device() == x.device()),
             op, ": expected a 0-dim ", x.dtype(), " denominator on ", x.device());
  Tensor grad = Tensor::empty(x.shape(), {x.dtype(), x.device()});
  if (x.numel() == 0) return grad;
  backend_for(x.device())
      .cross_entropy_backward(grad, grad_out.contiguous(), contiguous_or_undefined(denominator), x.contiguous(),
                              target.contiguous(), contiguous_or_undefined(weight), ignore_index, smoothing);
  return grad;
}

}  // namespace kiln::ops
