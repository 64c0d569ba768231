// The float32 vector kernels behind tensor/cpu/elementwise_simd.h, written
// once against a register type V that elementwise_avx2.cpp (8 lanes) and
// elementwise_avx512.cpp (16 lanes) define. Include only from those files:
// everything here is compiled with their instruction sets.
//
// V provides: Reg, Mask, kWidth; load/store/set1; add, sub, mul, div,
// fmadd(a, b, c) = a*b + c, fnmadd(a, b, c) = c - a*b, sqrt, round (to
// nearest even), abs, neg, minus_abs(x) = -|x|, copysign(magnitude, sign);
// max_raw/min_raw with the x86 rule "the second operand is returned when
// either is NaN"; is_nan, less, equal; select(mask, if_true, if_false);
// scale2(p, n) = p * 2^n for integral n in [-150, 128];
// scale2_nonpositive(p, n), the same for n in [-150, 0] and p in [0.5, 2];
// and split_exponent(x, e), which for a positive normal x returns m in
// [1, 2) and sets e with x = 2^e * m.
#pragma once

#include <cstdint>
#include <limits>

#include "tensor/backend.h"

namespace kiln::cpu::vec {

// e^r - 1 for |r| <= ln(2)/2: the degree-7 minimax polynomial of Sleef's
// expf_u10 written as r + r^2 * u(r), which keeps full relative precision
// for small r (needed by expm1 and so by tanh).
template <class V>
typename V::Reg expm1_reduced(typename V::Reg r) {
  using Reg = typename V::Reg;
  Reg u = V::set1(1.98527617612853646278381e-4f);
  u = V::fmadd(u, r, V::set1(1.39304355252534151077271e-3f));
  u = V::fmadd(u, r, V::set1(8.33336077630519866943359e-3f));
  u = V::fmadd(u, r, V::set1(4.16664853692054748535156e-2f));
  u = V::fmadd(u, r, V::set1(1.66666671633720397949219e-1f));
  u = V::fmadd(u, r, V::set1(0.5f));
  return V::fmadd(V::mul(r, r), u, r);
}

// Splits x = n*ln(2) + r with integral n and |r| <= ln(2)/2. ln(2) is split
// in two (Cody-Waite) so that n*ln2_hi is exact and r keeps its low bits.
template <class V>
typename V::Reg reduce_ln2(typename V::Reg x, typename V::Reg& n) {
  n = V::round(V::mul(x, V::set1(1.44269504088896340736f)));
  typename V::Reg r = V::fnmadd(n, V::set1(0.693145751953125f), x);
  return V::fnmadd(n, V::set1(1.428606765330187045e-6f), r);
}

template <class V>
typename V::Reg exp(typename V::Reg x) {
  // Beyond [-104, 89] e^x is 0 or inf in float; clamping keeps n within
  // what scale2 accepts. x is the second operand so a NaN passes through.
  x = V::max_raw(V::set1(-104.0f), x);
  x = V::min_raw(V::set1(89.0f), x);
  typename V::Reg n;
  typename V::Reg r = reduce_ln2<V>(x, n);
  return V::scale2(V::add(expm1_reduced<V>(r), V::set1(1.0f)), n);
}

// e^x for x <= 0 (what sigmoid needs): as exp, with one clamp and the
// cheaper scale2_nonpositive.
template <class V>
typename V::Reg exp_nonpositive(typename V::Reg x) {
  x = V::max_raw(V::set1(-104.0f), x);
  typename V::Reg n;
  typename V::Reg r = reduce_ln2<V>(x, n);
  return V::scale2_nonpositive(V::add(expm1_reduced<V>(r), V::set1(1.0f)), n);
}

// e^x - 1 for x in [0, 20] (what tanh needs): 2^n * (e^r - 1) + (2^n - 1),
// where 2^n - 1 is exact, so small x keep their relative precision.
template <class V>
typename V::Reg expm1_nonnegative(typename V::Reg x) {
  typename V::Reg n;
  typename V::Reg r = reduce_ln2<V>(x, n);
  typename V::Reg s = V::scale2(V::set1(1.0f), n);
  return V::fmadd(s, expm1_reduced<V>(r), V::sub(s, V::set1(1.0f)));
}

// 1 / (1 + e^-x), computed from e^-|x| <= 1 so that neither branch
// overflows: e/(1+e) for negative x keeps tiny results (down to subnormals)
// accurate instead of rounding 1 + e^-x to infinity. Both branches share
// d = 1 + e in [1, 2], so only the numerator is selected and one quotient
// is formed (a division measured cheaper than a reciprocal estimate with
// Newton steps on Zen 3). `factor` multiplies the numerator (x for
// gelu_tanh): one rounding fewer than multiplying the quotient.
template <class V>
typename V::Reg scaled_sigmoid(typename V::Reg x, typename V::Reg factor) {
  using Reg = typename V::Reg;
  Reg e = exp_nonpositive<V>(V::minus_abs(x));
  Reg d = V::add(V::set1(1.0f), e);
  Reg numerator = V::mul(factor, V::select(V::less(x, V::set1(0.0f)), e, V::set1(1.0f)));
  return V::div(numerator, d);
}

// scaled_sigmoid(x, 1) without the multiplication by 1.
template <class V>
typename V::Reg sigmoid(typename V::Reg x) {
  using Reg = typename V::Reg;
  Reg e = exp_nonpositive<V>(V::minus_abs(x));
  Reg d = V::add(V::set1(1.0f), e);
  return V::div(V::select(V::less(x, V::set1(0.0f)), e, V::set1(1.0f)), d);
}

// tanh|x| = d / (d + 2) with d = e^(2|x|) - 1; float tanh is exactly 1 from
// |x| = 9.01 on, so |x| is capped at 10 to keep d finite.
template <class V>
typename V::Reg tanh(typename V::Reg x) {
  using Reg = typename V::Reg;
  Reg ax = V::min_raw(V::set1(10.0f), V::abs(x));
  Reg d = expm1_nonnegative<V>(V::add(ax, ax));
  return V::copysign(V::div(d, V::add(d, V::set1(2.0f))), x);
}

// Natural log. x = 2^e * m with m in [sqrt(1/2), sqrt(2)), then
// log(m) = 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.172: the odd
// series to s^11 is within 1e-10 of atanh there. e * ln(2) is added in two
// parts (Cody-Waite) so that large exponents keep the low bits.
template <class V>
typename V::Reg log(typename V::Reg x) {
  using Reg = typename V::Reg;
  // Subnormals are scaled into the normal range first (2^23 exactly).
  auto subnormal = V::less(x, V::set1(1.17549435e-38f));
  Reg scaled = V::select(subnormal, V::mul(x, V::set1(8388608.0f)), x);
  Reg e;
  Reg m = V::split_exponent(scaled, e);  // scaled = 2^e * m, m in [1, 2)
  auto big = V::less(V::set1(1.41421356f), m);
  m = V::select(big, V::mul(m, V::set1(0.5f)), m);
  e = V::add(V::select(big, V::add(e, V::set1(1.0f)), e), V::select(subnormal, V::set1(-23.0f), V::set1(0.0f)));
  Reg s = V::div(V::sub(m, V::set1(1.0f)), V::add(m, V::set1(1.0f)));
  Reg s2 = V::mul(s, s);
  Reg u = V::set1(1.0f / 11);
  u = V::fmadd(u, s2, V::set1(1.0f / 9));
  u = V::fmadd(u, s2, V::set1(1.0f / 7));
  u = V::fmadd(u, s2, V::set1(1.0f / 5));
  u = V::fmadd(u, s2, V::set1(1.0f / 3));
  Reg log_m = V::fmadd(V::mul(V::add(s, s), s2), u, V::add(s, s));  // 2s + 2s^3 u(s^2)
  Reg r = V::fmadd(e, V::set1(1.428606765330187045e-6f), log_m);
  r = V::fmadd(e, V::set1(0.693145751953125f), r);
  // Special inputs: log(0) = -inf, log(inf) = inf, negatives and NaN give NaN.
  r = V::select(V::less(x, V::set1(0.0f)), V::set1(std::numeric_limits<float>::quiet_NaN()), r);
  r = V::select(V::equal(x, V::set1(0.0f)), V::set1(-std::numeric_limits<float>::infinity()), r);
  r = V::select(V::equal(x, V::set1(std::numeric_limits<float>::infinity())), x, r);
  return V::select(V::is_nan(x), x, r);
}

// torch's default (exact) gelu, x * Phi(x), through the upper tail
// Q(a) = 1 - Phi(a) of a = |x|: Phi(x) is 1 - Q for x >= 0 and Q for x < 0,
// so tiny results for negative x keep their relative precision. Q is
// written as e^(-a^2/2) * t * P(t) with t = 2 / (2 + a): t*P(t) is smooth
// on a in [0, 15] (it is the Mills ratio over sqrt(2 pi)), and P is a
// degree-10 least-squares fit in relative error (4.9e-8, under half an
// ulp; tests/tensor/elementwise_simd_test.cpp measures the whole op).
// a^2 is split exactly into hi + lo (FMA) because e^(-a^2/2) would
// otherwise multiply the rounding of a^2 by a^2/2.
template <class V>
typename V::Reg gelu(typename V::Reg x) {
  using Reg = typename V::Reg;
  // Beyond 15, Q(a) < 1e-50 rounds to 0 in float anyway.
  Reg a = V::min_raw(V::set1(15.0f), V::abs(x));
  Reg t = V::div(V::set1(2.0f), V::add(V::set1(2.0f), a));
  Reg p = V::set1(-0.03887827694416046f);
  p = V::fmadd(p, t, V::set1(0.18686731159687042f));
  p = V::fmadd(p, t, V::set1(-0.3111790418624878f));
  p = V::fmadd(p, t, V::set1(0.08941876888275146f));
  p = V::fmadd(p, t, V::set1(0.35304582118988037f));
  p = V::fmadd(p, t, V::set1(-0.4077167809009552f));
  p = V::fmadd(p, t, V::set1(0.053477510809898376f));
  p = V::fmadd(p, t, V::set1(0.022980758920311928f));
  p = V::fmadd(p, t, V::set1(0.1533125340938568f));
  p = V::fmadd(p, t, V::set1(0.1991914063692093f));
  p = V::fmadd(p, t, V::set1(0.19947998225688934f));
  Reg hi = V::mul(a, a);
  Reg lo = V::fmadd(a, a, V::neg(hi));  // a*a - hi, exactly
  Reg e = exp<V>(V::mul(V::set1(-0.5f), hi));
  e = V::fnmadd(V::mul(V::set1(0.5f), lo), e, e);  // e^(-lo/2) ~ 1 - lo/2, as |lo| < ulp(a^2)
  // x * Q(a), multiplied in this order so that x * e is still a normal
  // float where Q(a) alone would already be subnormal (a near 13). x < 0
  // gives x Q(a) (NaN at -inf, as torch's 0.5x(1 + erf) does); x >= 0 gives
  // x - a Q(a), with the capped a so that +inf stays inf.
  Reg m = V::mul(t, p);
  Reg negative = V::mul(V::mul(x, e), m);
  Reg positive = V::sub(x, V::mul(V::mul(a, e), m));
  return V::select(V::less(x, V::set1(0.0f)), negative, positive);
}

// torch's gelu(approximate='tanh'), 0.5x(1 + tanh(u)), rewritten as
// x * sigmoid(2u): the same function without the cancellation in 1 + tanh(u)
// for negative x, and with one exp and one division, less than a tanh.
template <class V>
typename V::Reg gelu_tanh(typename V::Reg x) {
  using Reg = typename V::Reg;
  // 2u = x (2k + 2k 0.044715 x^2) with k = sqrt(2/pi): three operations,
  // and about as many roundings as forming x^3 first.
  Reg two_u = V::mul(x, V::fmadd(V::set1(static_cast<float>(2 * 0.7978845608028654 * 0.044715)), V::mul(x, x),
                                 V::set1(static_cast<float>(2 * 0.7978845608028654))));
  return scaled_sigmoid<V>(two_u, x);
}

// maximum/minimum propagate a NaN from either side, as torch.
template <class V>
typename V::Reg maximum(typename V::Reg a, typename V::Reg b) {
  return V::select(V::is_nan(a), a, V::max_raw(a, b));
}
template <class V>
typename V::Reg minimum(typename V::Reg a, typename V::Reg b) {
  return V::select(V::is_nan(a), a, V::min_raw(a, b));
}

// Runs f over n elements. The last partial vector goes through a small
// buffer so that it is computed by the same vector code as the rest.
template <class V, class F>
void unary_loop(float* out, const float* in, int64_t n, const F& f) {
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(out + i, f(V::load(in + i)));
  if (i < n) {
    float buffer[W];
    for (int64_t j = 0; j < W; ++j) buffer[j] = i + j < n ? in[i + j] : 0.0f;
    V::store(buffer, f(V::load(buffer)));
    for (int64_t j = 0; i + j < n; ++j) out[i + j] = buffer[j];
  }
}

template <class V, class F>
void binary_loop(float* out, const float* a, int64_t a_step, const float* b, int64_t b_step, int64_t n, const F& f) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  if (a_step && b_step) {
    for (; i + W <= n; i += W) V::store(out + i, f(V::load(a + i), V::load(b + i)));
  } else if (a_step) {
    Reg bv = V::set1(*b);
    for (; i + W <= n; i += W) V::store(out + i, f(V::load(a + i), bv));
  } else if (b_step) {
    Reg av = V::set1(*a);
    for (; i + W <= n; i += W) V::store(out + i, f(av, V::load(b + i)));
  } else {
    Reg v = f(V::set1(*a), V::set1(*b));
    for (; i + W <= n; i += W) V::store(out + i, v);
  }
  if (i < n) {
    float buffer_a[W], buffer_b[W];
    for (int64_t j = 0; j < W; ++j) {
      buffer_a[j] = i + j < n ? a[(i + j) * a_step] : 1.0f;
      buffer_b[j] = i + j < n ? b[(i + j) * b_step] : 1.0f;
    }
    V::store(buffer_a, f(V::load(buffer_a), V::load(buffer_b)));
    for (int64_t j = 0; i + j < n; ++j) out[i + j] = buffer_a[j];
  }
}

template <class V>
bool binary_f32(BinaryOp op, float* out, const float* a, int64_t a_step, const float* b, int64_t b_step, int64_t n) {
  using Reg = typename V::Reg;
  switch (op) {
    case BinaryOp::Add:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg x, Reg y) { return V::add(x, y); });
      return true;
    case BinaryOp::Sub:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg x, Reg y) { return V::sub(x, y); });
      return true;
    case BinaryOp::Mul:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg x, Reg y) { return V::mul(x, y); });
      return true;
    case BinaryOp::Div:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg x, Reg y) { return V::div(x, y); });
      return true;
    case BinaryOp::Maximum:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg x, Reg y) { return maximum<V>(x, y); });
      return true;
    case BinaryOp::Minimum:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg x, Reg y) { return minimum<V>(x, y); });
      return true;
    case BinaryOp::ReluBackward:
      // less(0, y) is false for NaN: a NaN output passes no gradient.
      binary_loop<V>(out, a, a_step, b, b_step, n,
                     [](Reg g, Reg y) { return V::select(V::less(V::set1(0.0f), y), g, V::set1(0.0f)); });
      return true;
    default: return false;
  }
}

template <class V>
bool unary_f32(UnaryOp op, float* out, const float* in, int64_t n) {
  using Reg = typename V::Reg;
  switch (op) {
    case UnaryOp::Neg: unary_loop<V>(out, in, n, [](Reg x) { return V::neg(x); }); return true;
    case UnaryOp::Abs: unary_loop<V>(out, in, n, [](Reg x) { return V::abs(x); }); return true;
    case UnaryOp::Sqrt: unary_loop<V>(out, in, n, [](Reg x) { return V::sqrt(x); }); return true;
    case UnaryOp::Rsqrt:
      unary_loop<V>(out, in, n, [](Reg x) { return V::div(V::set1(1.0f), V::sqrt(x)); });
      return true;
    // max_raw(0, x) returns x when x is NaN, so relu keeps NaNs, as torch.
    case UnaryOp::Relu: unary_loop<V>(out, in, n, [](Reg x) { return V::max_raw(V::set1(0.0f), x); }); return true;
    case UnaryOp::Log: unary_loop<V>(out, in, n, [](Reg x) { return log<V>(x); }); return true;
    case UnaryOp::Exp: unary_loop<V>(out, in, n, [](Reg x) { return exp<V>(x); }); return true;
    case UnaryOp::Sigmoid: unary_loop<V>(out, in, n, [](Reg x) { return sigmoid<V>(x); }); return true;
    case UnaryOp::Tanh: unary_loop<V>(out, in, n, [](Reg x) { return tanh<V>(x); }); return true;
    case UnaryOp::Gelu: unary_loop<V>(out, in, n, [](Reg x) { return gelu<V>(x); }); return true;
    case UnaryOp::GeluTanh: unary_loop<V>(out, in, n, [](Reg x) { return gelu_tanh<V>(x); }); return true;
    default: return false;
  }
}

}  // namespace kiln::cpu::vec
