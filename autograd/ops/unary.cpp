// Differentiable unary ops: forward on the tensor layer, backward right under
// it (Note [Two levels of ops] in autograd/function.h). Ops whose derivative
// is cheapest from their result (exp, sqrt, sigmoid, ...) keep the output
// through record_with_outputs; masks (relu, clamp, abs) are computed with
// ops:: because they are constants of the backward, not functions of x to be
// differentiated again.
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::record_with_outputs;
using autograd::records_inplace;
using autograd::SavedTensor;
using autograd::TensorList;
using autograd::untracked;

namespace {

// 1 / sqrt(2 pi), the standard normal density at 0.
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// phi(x) = exp(-x^2 / 2) / sqrt(2 pi), the standard normal density, written
// with differentiable ops.
Tensor normal_density(const Tensor& x) { return mul(exp(mul(mul(x, x), -0.5)), kInvSqrt2Pi); }

// Phi(x), the standard normal CDF; its derivative is phi(x), so the exact
// gelu's backward stays differentiable. Kiln's kernels have no erf, so Phi is
// read off the exact gelu kernel as gelu(x) / x: the kernel works through
// erfc (tests/tensor/elementwise_simd_test.cpp measures it), so the quotient
// keeps the tiny values for negative x that 1 + erf would cancel. Near 0 the
// quotient is 0/0 or loses subnormal digits, and Phi(x) = 1/2 to every digit
// there anyway. 16-bit floats go through float32 so that the threshold and
// the quotient are representable.
Tensor normal_cdf(const Tensor& x) {
  Tensor out = untracked([&] {
    bool half = x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16;
    Tensor xc = half ? x.to(DType::Float32) : x;
    Tensor quotient = ops::div(ops::gelu(xc), xc);
    return ops::where(ops::gt(ops::abs(xc), 1e-30), quotient, 0.5).to(x.dtype());
  });
  if (autograd::needs_grad({x})) {
    record("normal_cdf", {x}, {out}, [saved_x = SavedTensor(x)](const TensorList& g) -> TensorList {
      return {mul(g[0], normal_density(saved_x.get()))};
    });
  }
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) {
  Tensor out = untracked([&] { return ops::neg(x); });
  if (autograd::needs_grad({x})) {
    record("neg", {x}, {out}, [](const TensorList& g) -> TensorList { return {neg(g[0])}; });
  }
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out = untracked([&] { return ops::abs(x); });
  if (autograd::needs_grad({x})) {
    record("abs", {x}, {out}, [saved_x = SavedTensor(x)](const TensorList& g) -> TensorList {
      // sign(x), 0 at 0 as torch: the subgradient that leaves a zero alone.
      Tensor sign = untracked([&] { return ops::sign(saved_x.get()); });
      return {mul(g[0], sign)};
    });
  }
  return out;
}

Tensor sign(const Tensor& x) {
  Tensor out = untracked([&] { return ops::sign(x); });
  if (autograd::needs_grad({x})) {
    // A step function: zero gradient everywhere, as torch's SignBackward.
    record("sign", {x}, {out}, [](const TensorList& g) -> TensorList { return {zeros_like(g[0])}; });
  }
  return out;
}

Tensor exp(const Tensor& x) {
  if (auto cast = autograd::autocast_float32(x)) return exp((*cast)[0]);
  Tensor out = untracked([&] { return ops::exp(x); });
  if (autograd::needs_grad({x})) {
    record_with_outputs("exp", {x}, {out}, [](const TensorList& g, const TensorList& outs) -> TensorList {
      return {mul(g[0], outs[0])};
    });
  }
  return out;
}

Tensor log(const Tensor& x) {
  if (auto cast = autograd::autocast_float32(x)) return log((*cast)[0]);
  Tensor out = untracked([&] { return ops::log(x); });
  if (autograd::needs_grad({x})) {
    record("log", {x}, {out}, [saved_x = SavedTensor(x)](const TensorList& g) -> TensorList {
      return {div(g[0], saved_x.get())};
    });
  }
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = untracked([&] { return ops::sqrt(x); });
  if (autograd::needs_grad({x})) {
    // d sqrt(x) = 1 / (2 sqrt(x))
    record_with_outputs("sqrt", {x}, {out}, [](const TensorList& g, const TensorList& outs) -> TensorList {
      return {div(g[0], mul(outs[0], 2.0))};
    });
  }
  return out;
}

Tensor rsqrt(const Tensor& x) {
  if (auto cast = autograd::autocast_float32(x)) return rsqrt((*cast)[0]);
  Tensor out = untracked([&] { return ops::rsqrt(x); });
  if (autograd::needs_grad({x})) {
    // d x^(-1/2) = -1/2 x^(-3/2) = -1/2 out^3
    record_with_outputs("rsqrt", {x}, {out}, [](const TensorList& g, const TensorList& outs) -> TensorList {
      return {mul(g[0], mul(pow(outs[0], 3), -0.5))};
    });
  }
  return out;
}

namespace {

// relu's and relu_'s backward, from the output: the mask comes from the
// output, which the next layer keeps alive anyway (and which is all relu_
// leaves); where() rather than a product so that the gradient at x <= 0 is
// 0 even when the incoming gradient is inf or NaN, as torch.
// Outside create_graph one fused kernel does (ops::relu_backward).
TensorList relu_backward_from_output(const TensorList& g, const TensorList& outs) {
  if (!GradMode::is_enabled()) return {ops::relu_backward(g[0], outs[0])};
  Tensor positive = untracked([&] { return ops::gt(outs[0], 0); });
  return {where(positive, g[0], 0.0)};
}

}  // namespace

Tensor relu(const Tensor& x) {
  Tensor out = untracked([&] { return ops::relu(x); });
  if (autograd::needs_grad({x})) record_with_outputs("relu", {x}, {out}, relu_backward_from_output);
  return out;
}

// Recorded when x requires grad (Note [Recorded in-place ops] in autograd/function.h).
Tensor& relu_(Tensor& x) {
  const bool record = records_inplace("relu_", x);
  ops::relu_(x);
  if (record) record_with_outputs("relu_", {x}, {x}, relu_backward_from_output);
  return x;
}

Tensor sigmoid(const Tensor& x) {
  Tensor out = untracked([&] { return ops::sigmoid(x); });
  if (autograd::needs_grad({x})) {
    // d sigmoid = out (1 - out)
    record_with_outputs("sigmoid", {x}, {out}, [](const TensorList& g, const TensorList& outs) -> TensorList {
      return {mul(g[0], mul(outs[0], 1.0 - outs[0]))};
    });
  }
  return out;
}

Tensor tanh(const Tensor& x) {
  Tensor out = untracked([&] { return ops::tanh(x); });
  if (autograd::needs_grad({x})) {
    // d tanh = 1 - out^2
    record_with_outputs("tanh", {x}, {out}, [](const TensorList& g, const TensorList& outs) -> TensorList {
      return {mul(g[0], 1.0 - mul(outs[0], outs[0]))};
    });
  }
  return out;
}

// gelu's backward: in ordinary training one fused kernel (ops::gelu_backward);
// when the backward is itself being recorded (create_graph), the same
// derivative written with differentiable ops, so that second derivatives
// flow (as the norms do, Note [Backward kernels and double backward] in
// nn/functional.h).
Tensor gelu(const Tensor& x, bool tanh_approximation) {
  Tensor out = untracked([&] { return ops::gelu(x, tanh_approximation); });
  if (!autograd::needs_grad({x})) return out;
  if (!tanh_approximation) {
    // d (x Phi(x)) = Phi(x) + x phi(x)
    record("gelu", {x}, {out}, [saved_x = SavedTensor(x)](const TensorList& g) -> TensorList {
      const Tensor& xv = saved_x.get();
      if (!GradMode::is_enabled()) return {ops::gelu_backward(g[0], xv)};
      return {mul(g[0], add(normal_cdf(xv), mul(xv, normal_density(xv))))};
    });
    return out;
  }
  // 0.5 x (1 + tanh(u)), u = k (x + c x^3): the derivative is
  // 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) k (1 + 3 c x^2), as torch's
  // gelu_backward with approximate='tanh'.
  record("gelu", {x}, {out}, [saved_x = SavedTensor(x)](const TensorList& g) -> TensorList {
    const Tensor& xv = saved_x.get();
    if (!GradMode::is_enabled()) return {ops::gelu_backward(g[0], xv, /*tanh_approximation=*/true)};
    constexpr double k = 0.79788456080286535588;  // sqrt(2 / pi)
    constexpr double c = 0.044715;
    Tensor x_sq = mul(xv, xv);
    Tensor t = tanh(mul(add(xv, mul(mul(x_sq, xv), c)), k));
    Tensor left = mul(add(t, 1.0), 0.5);
    Tensor right = mul(mul(mul(xv, 0.5), 1.0 - mul(t, t)), mul(add(mul(x_sq, 3 * c), 1.0), k));
    return {mul(g[0], add(left, right))};
  });
  return out;
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  Tensor out = untracked([&] { return ops::clamp(x, min, max); });
  if (autograd::needs_grad({x})) {
    // The gradient passes where min <= x <= max, bounds included, as torch's
    // clamp_backward; NaN inputs get none.
    record("clamp", {x}, {out}, [saved_x = SavedTensor(x), min, max](const TensorList& g) -> TensorList {
      Tensor inside = untracked([&] {
        const Tensor& xv = saved_x.get();
        Tensor lower = min ? ops::ge(xv, *min) : Tensor();
        Tensor upper = max ? ops::le(xv, *max) : Tensor();
        if (lower.defined() && upper.defined()) return ops::logical_and(lower, upper);
        return lower.defined() ? lower : upper;
      });
      return {where(inside, g[0], 0.0)};
    });
  }
  return out;
}

}  // namespace kiln
