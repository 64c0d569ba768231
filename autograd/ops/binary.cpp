// Differentiable arithmetic: forward on the tensor layer, backward right
// under it (Note [Two levels of ops] in autograd/function.h). Gradients of
// broadcast inputs are summed back to the input's shape with sum_to.
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::record_with_outputs;
using autograd::SavedTensor;
using autograd::sum_to;
using autograd::TensorList;
using autograd::untracked;

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  Tensor out = untracked([&] { return ops::add(a, b, alpha); });
  if (autograd::needs_grad({a, b})) {
    record("add", {a, b}, {out}, [sa = a.shape(), sb = b.shape(), alpha](const TensorList& g) -> TensorList {
      Tensor gb = alpha.to<double>() == 1.0 ? g[0] : mul(g[0], alpha);
      return {sum_to(g[0], sa), sum_to(gb, sb)};
    });
  }
  return out;
}

Tensor add(const Tensor& a, Scalar b) {
  Tensor out = untracked([&] { return ops::add(a, b); });
  if (autograd::needs_grad({a})) {
    record("add", {a}, {out}, [](const TensorList& g) -> TensorList { return {g[0]}; });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  Tensor out = untracked([&] { return ops::sub(a, b, alpha); });
  if (autograd::needs_grad({a, b})) {
    record("sub", {a, b}, {out}, [sa = a.shape(), sb = b.shape(), alpha](const TensorList& g) -> TensorList {
      return {sum_to(g[0], sa), sum_to(mul(g[0], -alpha.to<double>()), sb)};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, Scalar b) {
  Tensor out = untracked([&] { return ops::sub(a, b); });
  if (autograd::needs_grad({a})) {
    record("sub", {a}, {out}, [](const TensorList& g) -> TensorList { return {g[0]}; });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return ops::mul(a, b); });
  if (autograd::needs_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    // Each input's gradient needs only the other input: save just that.
    SavedTensor saved_a(need_b ? a : Tensor()), saved_b(need_a ? b : Tensor());
    record("mul", {a, b}, {out}, [saved_a, saved_b, sa = a.shape(), sb = b.shape()](const TensorList& g) -> TensorList {
      Tensor ga = saved_b.defined() ? sum_to(mul(g[0], saved_b.get()), sa) : Tensor();
      Tensor gb = saved_a.defined() ? sum_to(mul(g[0], saved_a.get()), sb) : Tensor();
      return {ga, gb};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, Scalar b) {
  Tensor out = untracked([&] { return ops::mul(a, b); });
  if (autograd::needs_grad({a})) {
    record("mul", {a}, {out}, [b](const TensorList& g) -> TensorList { return {mul(g[0], b)}; });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return ops::div(a, b); });
  if (autograd::needs_grad({a, b})) {
    bool need_b = b.requires_grad();
    SavedTensor saved_a(need_b ? a : Tensor()), saved_b(b);
    record("div", {a, b}, {out}, [saved_a, saved_b, sa = a.shape(), sb = b.shape()](const TensorList& g) -> TensorList {
      const Tensor& bv = saved_b.get();
      Tensor ga = sum_to(div(g[0], bv), sa);
      // d(a/b)/db = -a / b^2
      Tensor gb = saved_a.defined() ? sum_to(neg(div(mul(g[0], saved_a.get()), mul(bv, bv))), sb) : Tensor();
      return {ga, gb};
    });
  }
  return out;
}

Tensor div(const Tensor& a, Scalar b) {
  Tensor out = untracked([&] { return ops::div(a, b); });
  if (autograd::needs_grad({a})) {
    record("div", {a}, {out}, [b](const TensorList& g) -> TensorList { return {div(g[0], b)}; });
  }
  return out;
}

Tensor pow(const Tensor& a, Scalar exponent) {
  if (auto cast = autograd::autocast_float32(a)) return pow((*cast)[0], exponent);
  Tensor out = untracked([&] { return ops::pow(a, exponent); });
  if (autograd::needs_grad({a})) {
    record("pow", {a}, {out}, [saved_a = SavedTensor(a), exponent](const TensorList& g) -> TensorList {
      // d a^p = p a^(p-1); p == 0 is a constant, whose gradient is 0 even
      // where a^(-1) is not finite, as torch.
      if (exponent.to<double>() == 0.0) return {zeros_like(g[0])};
      Scalar lowered =
          exponent.is_floating() ? Scalar(exponent.to<double>() - 1.0) : Scalar(exponent.to<int64_t>() - 1);
      return {mul(mul(g[0], pow(saved_a.get(), lowered)), exponent)};
    });
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (auto cast = autograd::autocast_float32(a, b)) return pow((*cast)[0], (*cast)[1]);
  Tensor out = untracked([&] { return ops::pow(a, b); });
  if (autograd::needs_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record_with_outputs("pow", {a, b}, {out},
                        [saved_a = SavedTensor(a), saved_b = SavedTensor(b), sa = a.shape(), sb = b.shape(), need_a,
                         need_b](const TensorList& g, const TensorList& outs) -> TensorList {
                          const Tensor& av = saved_a.get();
                          const Tensor& bv = saved_b.get();
                          Tensor ga, gb;
                          if (need_a) {
                            // d a^b / da = b a^(b-1), and 0 where b == 0 (a^(-1) may be inf there).
                            Tensor nonzero_exponent = untracked([&] { return ops::ne(bv, 0); });
                            ga = sum_to(where(nonzero_exponent, mul(g[0], mul(bv, pow(av, sub(bv, 1)))), 0.0), sa);
                          }
                          if (need_b) {
                            // d a^b / db = a^b log(a); at a == 0 with b >= 0 that is 0 * -inf,
                            // which torch defines as 0 (0^b is flat in b there, or jumps).
                            Tensor defined_log = untracked(
                                [&] { return ops::logical_not(ops::logical_and(ops::eq(av, 0), ops::ge(bv, 0))); });
                            gb = sum_to(where(defined_log, mul(g[0], mul(outs[0], log(av))), 0.0), sb);
                          }
                          return {ga, gb};
                        });
  }
  return out;
}

namespace {

// The gradients of maximum (is_max) or minimum: the winning input gets the
// gradient and a tie splits it in halves, as torch. With a NaN on either side
// neither input loses, so both get all of it, as in torch.
TensorList extremum_backward(const Tensor& g, const Tensor& a, const Tensor& b, bool is_max, const Shape& sa,
                             const Shape& sb) {
  Tensor a_keeps, b_keeps, tie;
  {
    NoGradGuard no_grad;  // the masks are constants of the backward
    a_keeps = ops::logical_not(is_max ? ops::lt(a, b) : ops::gt(a, b));
    b_keeps = ops::logical_not(is_max ? ops::gt(a, b) : ops::lt(a, b));
    tie = ops::eq(a, b);
  }
  Tensor shared = where(tie, mul(g, 0.5), g);
  return {sum_to(where(a_keeps, shared, 0.0), sa), sum_to(where(b_keeps, shared, 0.0), sb)};
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return ops::maximum(a, b); });
  if (autograd::needs_grad({a, b})) {
    record("maximum", {a, b}, {out},
           [saved_a = SavedTensor(a), saved_b = SavedTensor(b), sa = a.shape(), sb = b.shape()](const TensorList& g) {
             return extremum_backward(g[0], saved_a.get(), saved_b.get(), /*is_max=*/true, sa, sb);
           });
  }
  return out;
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return ops::minimum(a, b); });
  if (autograd::needs_grad({a, b})) {
    record("minimum", {a, b}, {out},
           [saved_a = SavedTensor(a), saved_b = SavedTensor(b), sa = a.shape(), sb = b.shape()](const TensorList& g) {
             return extremum_backward(g[0], saved_a.get(), saved_b.get(), /*is_max=*/false, sa, sb);
           });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return ops::where(cond, a, b); });
  if (autograd::needs_grad({a, b})) {
    record("where", {a, b}, {out},
           [saved_cond = SavedTensor(cond), sa = a.shape(), sb = b.shape()](const TensorList& g) -> TensorList {
             const Tensor& c = saved_cond.get();
             Tensor not_c = untracked([&] { return ops::logical_not(c); });
             return {sum_to(where(c, g[0], 0.0), sa), sum_to(where(not_c, g[0], 0.0), sb)};
           });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  Tensor out = untracked([&] { return ops::where(cond, a, b); });
  if (autograd::needs_grad({a})) {
    record("where", {a}, {out}, [saved_cond = SavedTensor(cond), sa = a.shape()](const TensorList& g) -> TensorList {
      return {sum_to(where(saved_cond.get(), g[0], 0.0), sa)};
    });
  }
  return out;
}

Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  Tensor out = untracked([&] { return ops::where(cond, a, b); });
  if (autograd::needs_grad({b})) {
    record("where", {b}, {out}, [saved_cond = SavedTensor(cond), sb = b.shape()](const TensorList& g) -> TensorList {
      return {sum_to(where(saved_cond.get(), 0.0, g[0]), sb)};
    });
  }
  return out;
}

// Two numbers: nothing to differentiate.
Tensor where(const Tensor& cond, Scalar a, Scalar b) {
  return untracked([&] { return ops::where(cond, a, b); });
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(Scalar a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(Scalar a, const Tensor& b) {
  Tensor out = untracked([&] { return ops::operator/(a, b); });
  if (autograd::needs_grad({b})) {
    // d(a/b)/db = -a / b^2 = -out / b
    autograd::record_with_outputs(
        "div", {b}, {out}, [saved_b = SavedTensor(b)](const TensorList& g, const TensorList& outs) -> TensorList {
          return {neg(div(mul(g[0], outs[0]), saved_b.get()))};
        });
  }
  return out;
}

}  // namespace kiln
