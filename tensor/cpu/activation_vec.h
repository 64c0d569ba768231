// The float32 vector kernels behind tensor/cpu/activation_simd.h, written
// once against the register type V of tensor/cpu/elementwise_vec.h (which
// says what V provides; these also use less_equal, an ordered a <= b that is
// false when either is NaN). Include only from elementwise_avx2.cpp and
// elementwise_avx512.cpp, after elementwise_vec.h.
#pragma once

#include <cstdint>

#include "tensor/cpu/activation_simd.h"
#include "tensor/cpu/elementwise_vec.h"

namespace kiln::cpu::vec {

// e^x - 1 for x <= 0 (what elu needs). Below x = -20, e^x < 2^-28 and the
// float result is -1, so x is raised to -20 first (a NaN, the second
// operand, passes through) and expm1_bounded takes the rest.
template <class V>
typename V::Reg expm1_nonpositive(typename V::Reg x) {
  return expm1_bounded<V>(V::max_raw(V::set1(-20.0f), x));
}

// x <= 0 ? alpha (e^x - 1) : x; a NaN x is not <= 0 and is returned, as
// torch's. The negative side is computed from min(0, x) so that large x do
// no work that could overflow.
template <class V>
typename V::Reg elu(typename V::Reg x, typename V::Reg alpha) {
  typename V::Reg negative = V::mul(alpha, expm1_nonpositive<V>(V::min_raw(V::set1(0.0f), x)));
  return V::select(V::less_equal(x, V::set1(0.0f)), negative, x);
}

// g * elu'(x) = x <= 0 ? (g alpha) e^x : g, multiplied in torch's order.
template <class V>
typename V::Reg elu_backward(typename V::Reg g, typename V::Reg x, typename V::Reg alpha) {
  typename V::Reg e = exp_nonpositive<V>(V::min_raw(V::set1(0.0f), x));
  return V::select(V::less_equal(x, V::set1(0.0f)), V::mul(V::mul(g, alpha), e), g);
}

// The same from elu's output y: y <= 0 ? g (y + alpha) : g.
template <class V>
typename V::Reg elu_backward_from_output(typename V::Reg g, typename V::Reg y, typename V::Reg alpha) {
  return V::select(V::less_equal(y, V::set1(0.0f)), V::mul(g, V::add(y, alpha)), g);
}

// x <= lo || x >= hi ? 0 : g, as two selections (a NaN x keeps g).
template <class V>
typename V::Reg hardtanh_backward(typename V::Reg g, typename V::Reg x, typename V::Reg lo, typename V::Reg hi) {
  typename V::Reg zero = V::set1(0.0f);
  typename V::Reg r = V::select(V::less_equal(x, lo), zero, g);
  return V::select(V::less_equal(hi, x), zero, r);
}

template <class V>
void elu_f32(float* out, const float* x, int64_t n, float alpha) {
  using Reg = typename V::Reg;
  const Reg a = V::set1(alpha);
  unary_loop<V>(out, x, n, [a](Reg v) { return elu<V>(v, a); });
}

template <class V>
void elu_backward_f32(float* out, const float* grad, int64_t grad_step, const float* x, int64_t x_step, int64_t n,
                      float alpha, bool from_output) {
  using Reg = typename V::Reg;
  const Reg a = V::set1(alpha);
  if (from_output) {
    return binary_loop<V>(out, grad, grad_step, x, x_step, n,
                          [a](Reg g, Reg y) { return elu_backward_from_output<V>(g, y, a); });
  }
  binary_loop<V>(out, grad, grad_step, x, x_step, n, [a](Reg g, Reg v) { return elu_backward<V>(g, v, a); });
}

template <class V>
void hardtanh_backward_f32(float* out, const float* grad, int64_t grad_step, const float* x, int64_t x_step,
                           int64_t n, float lo, float hi) {
  using Reg = typename V::Reg;
  const Reg l = V::set1(lo), h = V::set1(hi);
  binary_loop<V>(out, grad, grad_step, x, x_step, n, [l, h](Reg g, Reg v) { return hardtanh_backward<V>(g, v, l, h); });
}

// The table of one register width, for activation_f32_avx2 / _avx512.
template <class V>
constexpr ActivationF32Kernels activation_f32_table() {
  return {elu_f32<V>, elu_backward_f32<V>, hardtanh_backward_f32<V>};
}

}  // namespace kiln::cpu::vec
