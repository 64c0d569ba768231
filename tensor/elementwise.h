// Elementwise ops with NumPy broadcasting and PyTorch type promotion.
//
// Note [Type promotion]
// Binary ops compute in result_type(a, b), as torch.result_type:
// - Categories are bool < integer < floating point.
// - Among tensors with at least one dim, the types promote with promote_types.
// - 0-dim tensors and C++ numbers (Scalars) only decide the result when they
//   are of a higher category than every dimensioned operand: int32 tensor +
//   2.5 is float32 (the default float), float16 tensor + 2.5 stays float16,
//   int8 tensor + 1000 stays int8.
// Comparisons and logical ops return Bool. Division of integers is true
// division and gives the default float type, as torch.div.
#pragma once

#include <optional>

#include "tensor/tensor.h"

namespace kiln {

DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, Scalar b);

// True when both have the same shape and every element is within
// atol + rtol * |b| (NaNs equal only when equal_nan).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// True when shapes and all values are equal.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace kiln

namespace kiln::ops {

// ---- unary ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);   // integer inputs give the default float type, as torch
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor logical_not(const Tensor& x);
// -1, 0 or 1 by the sign of each entry, in x's dtype, as torch.sign: 0 for
// -0 and NaN; bool x is returned as a copy (false 0, true 1).
Tensor sign(const Tensor& x);

// ---- binary ----
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha * b
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a - alpha * b
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// relu's gradient from its output: grad where output > 0, else 0 (also where
// grad is inf or NaN, as torch's threshold_backward); one pass, no mask tensor.
Tensor relu_backward(const Tensor& grad, const Tensor& output);
// gelu's gradient from its input in one pass: grad * gelu'(x), where
// gelu'(x) = Phi(x) + x phi(x) (exact), or the derivative of torch's
// approximate='tanh' form. Floating tensors, broadcast together; not
// differentiable itself (autograd records the formula for double backward).
Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation = false);

Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

// cond ? a : b, broadcasting all three; a and b promote as a binary op.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
// Both numbers: the result has cond's shape and device, and the dtype the
// two numbers promote to (int64, the default float, or bool), as torch.
//   Tensor weights = where(mask, 1.0, 0.0);   // float32
Tensor where(const Tensor& cond, Scalar a, Scalar b);

// ---- in place: the result is cast to x's dtype (an error if that would
// turn a float result into an integer tensor, as torch); x must not be a
// broadcast view. Each bumps x's version counter. ----
Tensor& add_(Tensor& x, const Tensor& b, Scalar alpha = 1);
Tensor& add_(Tensor& x, Scalar b);
Tensor& sub_(Tensor& x, const Tensor& b, Scalar alpha = 1);
Tensor& sub_(Tensor& x, Scalar b);
Tensor& mul_(Tensor& x, const Tensor& b);
Tensor& mul_(Tensor& x, Scalar b);
Tensor& div_(Tensor& x, const Tensor& b);
Tensor& div_(Tensor& x, Scalar b);
Tensor& pow_(Tensor& x, Scalar exponent);
Tensor& neg_(Tensor& x);
Tensor& abs_(Tensor& x);
Tensor& exp_(Tensor& x);
Tensor& log_(Tensor& x);
Tensor& sqrt_(Tensor& x);
Tensor& relu_(Tensor& x);
Tensor& sigmoid_(Tensor& x);
Tensor& tanh_(Tensor& x);
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& fill_(Tensor& x, Scalar value);
Tensor& zero_(Tensor& x);

// ---- operators ----
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, Scalar b);

}  // namespace kiln::ops
