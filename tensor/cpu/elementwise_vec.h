// The float32 vector kernels behind tensor/cpu/elementwise_simd.h, written
// once against a register type V that elementwise_avx2.cpp (8 lanes) and
// elementwise_avx512.cpp (16 lanes) define. Include only from those files:
// everything here is compiled with their instruction sets.
//
// V provides: Reg, Mask, kWidth; load/store/set1; add, sub, mul, div,
// fmadd(a, b, c) = a*b + c, fnmadd(a, b, c) = c - a*b, sqrt, round (to
// nearest even), abs, neg, minus_abs(x) = -|x|, copysign(magnitude, sign);
// max_raw/min_raw with the x86 rule "the second operand is returned when
// either is NaN"; is_nan, less, less_equal (ordered: false for NaN), equal;
// select(mask, if_true, if_false);
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

// e^x - 1 for x in [-20, 20] (tanh takes [0, 20], elu [-20, 0]):
// 2^n * (e^r - 1) + (2^n - 1), where 2^n - 1 is exact, so small |x| keep
// their relative precision.
template <class V>
typename V::Reg expm1_bounded(typename V::Reg x) {
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
  Reg d = expm1_bounded<V>(V::add(ax, ax));
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

// t P(t) with t = 2 / (2 + a) for a in [0, 15]: the upper tail of the
// standard normal scaled by its density, Q(a) = 1 - Phi(a) = e^(-a^2/2) t P(t).
// t P(t) is smooth there (it is the Mills ratio over sqrt(2 pi)), and P is a
// degree-10 least-squares fit in relative error (4.9e-8, under half an ulp;
// tests/tensor/elementwise_simd_test.cpp measures gelu and its derivative).
template <class V>
typename V::Reg normal_tail_ratio(typename V::Reg a) {
  using Reg = typename V::Reg;
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
  return V::mul(t, p);
}

// torch's default (exact) gelu, x * Phi(x), through the upper tail
// Q(a) = 1 - Phi(a) of a = |x|: Phi(x) is 1 - Q for x >= 0 and Q for x < 0,
// so tiny results for negative x keep their relative precision. Q is
// e^(-a^2/2) * normal_tail_ratio(a). a^2 is split exactly into hi + lo (FMA)
// because e^(-a^2/2) would otherwise multiply the rounding of a^2 by a^2/2.
template <class V>
typename V::Reg gelu(typename V::Reg x) {
  using Reg = typename V::Reg;
  // Beyond 15, Q(a) < 1e-50 rounds to 0 in float anyway.
  Reg a = V::min_raw(V::set1(15.0f), V::abs(x));
  Reg m = normal_tail_ratio<V>(a);
  Reg hi = V::mul(a, a);
  Reg lo = V::fmadd(a, a, V::neg(hi));  // a*a - hi, exactly
  Reg e = exp<V>(V::mul(V::set1(-0.5f), hi));
  e = V::fnmadd(V::mul(V::set1(0.5f), lo), e, e);  // e^(-lo/2) ~ 1 - lo/2, as |lo| < ulp(a^2)
  // x * Q(a), multiplied in this order so that x * e is still a normal
  // float where Q(a) alone would already be subnormal (a near 13). x < 0
  // gives x Q(a) (NaN at -inf, as torch's 0.5x(1 + erf) does); x >= 0 gives
  // x - a Q(a), with the capped a so that +inf stays inf.
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

// e^y for y in [-172, 0] as a normal float `big` and a factor `unscale`
// with e^y = big * unscale. Below y = -80, e^y is under 2^-115: the
// derivatives below multiply it by their other factors and by the
// gradient, and subnormal products would lose digits at every step; there
// big is e^y * 2^100 and unscale is 2^-100 (elsewhere 1), for the caller to
// apply after its last multiplication, rounding a subnormal result once.
// (Products with big stay finite: big < 2^-15 where scaled.)
template <class V>
typename V::Reg exp_nonpositive_scaled(typename V::Reg y, typename V::Reg& unscale) {
  typename V::Reg n;
  typename V::Reg r = reduce_ln2<V>(y, n);
  auto tiny = V::less(y, V::set1(-80.0f));
  n = V::add(n, V::select(tiny, V::set1(100.0f), V::set1(0.0f)));  // n + 100 >= -148 where tiny
  unscale = V::select(tiny, V::set1(0x1p-100f), V::set1(1.0f));
  return V::scale2(V::add(expm1_reduced<V>(r), V::set1(1.0f)), n);
}

// NaN where x is NaN or infinite, `d` elsewhere: gelu's derivative at +-inf
// is inf * 0 in torch's formula (x phi(x)), so NaN, as torch's gelu_backward.
template <class V>
typename V::Reg nan_unless_finite(typename V::Reg x, typename V::Reg d) {
  return V::select(V::less(V::abs(x), V::set1(std::numeric_limits<float>::infinity())), d,
                   V::set1(std::numeric_limits<float>::quiet_NaN()));
}

// g * gelu'(x) for the exact gelu, gelu'(x) = Phi(x) + x phi(x), from the
// pieces of vec::gelu. With a = |x|, phi = e^(-a^2/2) k (k = 1/sqrt(2 pi))
// and Q(a) = e^(-a^2/2) m (m = normal_tail_ratio), and s = a k - m:
//   x >= 0: 1 - Q(a) + a phi(a) = 1 + e^(-a^2/2) s
//   x <  0: Q(a) - a phi(a)     =   - e^(-a^2/2) s
// so the negative side, down to subnormal results near x = -14 (and below
// for large gradients), is a product with no 1 + erf to cancel. s cancels
// only near a = 0.75, the derivative's root, where the absolute error stays
// within ulps of Phi.
template <class V>
typename V::Reg gelu_backward(typename V::Reg g, typename V::Reg x) {
  using Reg = typename V::Reg;
  // Beyond a = 18 the derivative is 1 or under 3e-70, which gives the float
  // result g or 0 for any |g| < 1e24.
  Reg a = V::min_raw(V::set1(18.0f), V::abs(x));
  Reg m = normal_tail_ratio<V>(a);
  Reg hi = V::mul(a, a);
  Reg lo = V::fmadd(a, a, V::neg(hi));  // a*a - hi, exactly (see vec::gelu)
  Reg unscale;
  Reg e = exp_nonpositive_scaled<V>(V::mul(V::set1(-0.5f), hi), unscale);
  e = V::fnmadd(V::mul(V::set1(0.5f), lo), e, e);
  Reg es = V::mul(e, V::fmadd(a, V::set1(0.398942280401432678f), V::neg(m)));  // e^(-a^2/2) s / unscale
  Reg negative = V::mul(V::mul(g, V::neg(es)), unscale);
  negative = V::select(V::less(V::set1(18.0f), V::abs(x)), V::mul(g, V::set1(-0.0f)), negative);
  Reg positive = V::mul(g, V::fmadd(es, unscale, V::set1(1.0f)));
  return nan_unless_finite<V>(x, V::select(V::less(x, V::set1(0.0f)), negative, positive));
}

// g * gelu'(x) for torch's tanh approximation. With 2u = 2k (x + c x^3) as
// in vec::gelu_tanh and sig = sigmoid(2u): 0.5 (1 + tanh u) = sig and
// 1 - tanh(u)^2 = 4 sig (1 - sig), so torch's derivative
//   0.5 (1 + tanh u) + 0.5 x (1 - tanh(u)^2) k (1 + 3c x^2)
// is sig (1 + x (1 - sig) du) with du = 2k (1 + 3c x^2), the derivative
// of 2u. sig and 1 - sig are both taken from e = e^-|2u| (one is e / (1 + e),
// the other 1 / (1 + e)), so neither 1 + tanh nor 1 - tanh^2 cancels.
template <class V>
typename V::Reg gelu_tanh_backward(typename V::Reg g, typename V::Reg x) {
  using Reg = typename V::Reg;
  constexpr double k = 0.7978845608028654, c = 0.044715;
  // Beyond |x| = 12.5, |2u| > 159 and the derivative is 1 or under 4e-67,
  // which gives the float result g or 0 for any |g| < 1e21; the cap keeps
  // -|2u| within exp_nonpositive_scaled's range.
  Reg xc = V::min_raw(V::set1(12.5f), V::max_raw(V::set1(-12.5f), x));
  Reg x2 = V::mul(xc, xc);
  Reg two_u = V::mul(xc, V::fmadd(V::set1(static_cast<float>(2 * k * c)), x2, V::set1(static_cast<float>(2 * k))));
  Reg du = V::fmadd(V::set1(static_cast<float>(6 * k * c)), x2, V::set1(static_cast<float>(2 * k)));
  Reg unscale;
  Reg e = exp_nonpositive_scaled<V>(V::minus_abs(two_u), unscale);
  Reg e_small = V::mul(e, unscale);
  Reg d = V::add(V::set1(1.0f), e_small);
  // sig d and (1 - sig) d are e and 1 for x < 0, 1 and e for x >= 0, and
  // sig (1 + x (1 - sig) du) = (sig d) (d + x ((1 - sig) d) du) / d^2.
  auto negative_x = V::less(two_u, V::set1(0.0f));
  Reg rest = V::fmadd(V::mul(xc, V::select(negative_x, V::set1(1.0f), e_small)), du, d);
  Reg q = V::div(rest, V::mul(d, d));
  Reg negative = V::mul(V::mul(g, V::mul(e, q)), unscale);  // e q is normal: g rounds in once
  negative = V::select(V::less(x, V::set1(-12.5f)), V::mul(g, V::set1(-0.0f)), negative);
  Reg positive = V::mul(g, q);
  return nan_unless_finite<V>(x, V::select(negative_x, negative, positive));
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
    case BinaryOp::GeluBackward:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg g, Reg x) { return gelu_backward<V>(g, x); });
      return true;
    case BinaryOp::GeluTanhBackward:
      binary_loop<V>(out, a, a_step, b, b_step, n, [](Reg g, Reg x) { return gelu_tanh_backward<V>(g, x); });
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
