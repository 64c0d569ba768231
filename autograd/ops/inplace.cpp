// In-place ops: the tensor layer's, after checking that autograd is not
// being bypassed (Note [Autograd hooks]: check_inplace). Kiln does not
// record these; a parameter update belongs under NoGradGuard. relu_ is the
// exception, recorded beside relu in unary.cpp (Note [Recorded in-place
// ops] in autograd/function.h).
#include "autograd/ops.h"
#include "tensor/autograd_hooks.h"

namespace kiln {

namespace {

void check(std::string_view op, const Tensor& x, const Tensor& src = Tensor()) {
  if (x.impl()->autograd_meta() || (src.defined() && src.impl()->autograd_meta())) {
    autograd_hooks().check_inplace(op, x, src);
  }
}

}  // namespace

Tensor& add_(Tensor& x, const Tensor& b, Scalar alpha) { return check("add_", x, b), ops::add_(x, b, alpha); }
Tensor& add_(Tensor& x, Scalar b) { return check("add_", x), ops::add_(x, b); }
Tensor& sub_(Tensor& x, const Tensor& b, Scalar alpha) { return check("sub_", x, b), ops::sub_(x, b, alpha); }
Tensor& sub_(Tensor& x, Scalar b) { return check("sub_", x), ops::sub_(x, b); }
Tensor& mul_(Tensor& x, const Tensor& b) { return check("mul_", x, b), ops::mul_(x, b); }
Tensor& mul_(Tensor& x, Scalar b) { return check("mul_", x), ops::mul_(x, b); }
Tensor& div_(Tensor& x, const Tensor& b) { return check("div_", x, b), ops::div_(x, b); }
Tensor& div_(Tensor& x, Scalar b) { return check("div_", x), ops::div_(x, b); }
Tensor& pow_(Tensor& x, Scalar exponent) { return check("pow_", x), ops::pow_(x, exponent); }
Tensor& neg_(Tensor& x) { return check("neg_", x), ops::neg_(x); }
Tensor& abs_(Tensor& x) { return check("abs_", x), ops::abs_(x); }
Tensor& exp_(Tensor& x) { return check("exp_", x), ops::exp_(x); }
Tensor& log_(Tensor& x) { return check("log_", x), ops::log_(x); }
Tensor& sqrt_(Tensor& x) { return check("sqrt_", x), ops::sqrt_(x); }
Tensor& sigmoid_(Tensor& x) { return check("sigmoid_", x), ops::sigmoid_(x); }
Tensor& tanh_(Tensor& x) { return check("tanh_", x), ops::tanh_(x); }
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  return check("clamp_", x), ops::clamp_(x, min, max);
}
Tensor& fill_(Tensor& x, Scalar value) { return check("fill_", x), ops::fill_(x, value); }
Tensor& zero_(Tensor& x) { return check("zero_", x), ops::zero_(x); }
Tensor& scatter_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return check("scatter_add_", x, src), ops::scatter_add_(x, dim, index, src);
}
Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }
Tensor& operator+=(Tensor& a, Scalar b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, Scalar b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, Scalar b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, Scalar b) { return div_(a, b); }

}  // namespace kiln
