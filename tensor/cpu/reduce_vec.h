// The float32 vector kernels behind tensor/cpu/reduce_simd.h (sums, max/min,
// exp and softmax rows), written once against a register type V that
// reduce_avx2.cpp (8 lanes) and reduce_avx512.cpp (16 lanes) define. Include
// only from those files: everything here is compiled with their instruction
// sets.
//
// V provides: Reg; Mask (a lane predicate: a vector of all-ones lanes on
// AVX2, a mask register on AVX-512); Tail (the lanes of a partial vector);
// kWidth. load/store/set1/zero; add, sub, mul, fmadd(a, b, c) = a*b + c,
// fnmadd(a, b, c) = c - a*b, floor; max_raw/min_raw with the x86 rule "the
// second operand is returned when either is NaN"; reduce_add/max/min (the
// lanes folded to one float); unordered(a, b) (either lane NaN), less,
// greater, mask_or, no_lanes(), any(mask); zero_where(mask, v) (masked lanes
// become 0), select(mask, if_true, if_false); pow2(n) = 2^n for integral n
// in the normal range, built in the exponent bits; tail_mask(count) (lanes
// [0, count), every lane when count >= kWidth), load_tail (lanes outside
// read as 0, no memory touched there), store_tail, zero_outside(tail, v).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::cpu::vec {
// Unnamed: each including file gets its own internal copy, compiled for its
// instruction set, so no instantiation is shared (weak) between the AVX2 and
// AVX-512 objects, and GCC may fold identical ones within a file.
namespace {

// max/min drop a NaN in their first operand, so NaNs are tracked in a
// separate unordered-compare mask and win at the end.
template <class V, bool kMax>
float extreme_f32(const float* x, int64_t n) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  auto pick = [](Reg a, Reg b) { return kMax ? V::max_raw(a, b) : V::min_raw(a, b); };
  Reg first = V::set1(x[0]);
  Reg acc0 = first, acc1 = first, acc2 = first, acc3 = first;
  typename V::Mask nan = V::no_lanes();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    Reg a = V::load(x + i), b = V::load(x + i + W);
    Reg c = V::load(x + i + 2 * W), d = V::load(x + i + 3 * W);
    acc0 = pick(acc0, a);
    acc1 = pick(acc1, b);
    acc2 = pick(acc2, c);
    acc3 = pick(acc3, d);
    nan = V::mask_or(nan, V::mask_or(V::unordered(a, b), V::unordered(c, d)));
  }
  for (; i + W <= n; i += W) {
    Reg a = V::load(x + i);
    acc0 = pick(acc0, a);
    nan = V::mask_or(nan, V::unordered(a, a));
  }
  Reg acc = pick(pick(acc0, acc1), pick(acc2, acc3));
  float result = kMax ? V::reduce_max(acc) : V::reduce_min(acc);
  if (V::any(nan)) return std::numeric_limits<float>::quiet_NaN();
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    result = kMax ? (x[i] > result ? x[i] : result) : (x[i] < result ? x[i] : result);
  }
  return result;
}

// exp(x) for float32 lanes: Cephes' range reduction x = n*ln2 + r, a degree-5
// polynomial for e^r on |r| <= ln2/2, and 2^n built in the exponent bits.
// About 1 ulp on the normal range; below it the result flushes to 0, above
// it is inf, and NaN stays NaN.
template <class V>
typename V::Reg exp_cephes(typename V::Reg x) {
  using Reg = typename V::Reg;
  const Reg hi = V::set1(88.3762626647949f);
  const Reg lo = V::set1(-87.3365447505531f);
  // min/max return the second operand when one is NaN, so x goes second.
  Reg clamped = V::max_raw(lo, V::min_raw(hi, x));
  Reg n = V::floor(V::fmadd(clamped, V::set1(1.44269504088896341f), V::set1(0.5f)));
  Reg r = V::fnmadd(n, V::set1(0.693359375f), clamped);
  r = V::fnmadd(n, V::set1(-2.12194440e-4f), r);
  Reg p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  Reg result = V::mul(p, V::pow2(n));
  result = V::zero_where(V::less(x, lo), result);  // underflow -> 0
  return V::select(V::greater(x, hi), V::set1(std::numeric_limits<float>::infinity()), result);
}

template <class V>
float sum_f32(const float* x, int64_t n) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  Reg acc0 = V::zero(), acc1 = V::zero();
  Reg acc2 = V::zero(), acc3 = V::zero();
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    acc0 = V::add(acc0, V::load(x + i));
    acc1 = V::add(acc1, V::load(x + i + W));
    acc2 = V::add(acc2, V::load(x + i + 2 * W));
    acc3 = V::add(acc3, V::load(x + i + 3 * W));
  }
  for (; i + W <= n; i += W) acc0 = V::add(acc0, V::load(x + i));
  float total = V::reduce_add(V::add(V::add(acc0, acc1), V::add(acc2, acc3)));
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i];
  return total + tail;
}

template <class V>
void exp_f32(float* out, const float* in, int64_t n) {
  constexpr int64_t W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(out + i, exp_cephes<V>(V::load(in + i)));
  for (; i < n; ++i) out[i] = std::exp(in[i]);
}

template <class V>
void softmax_row_f32(float* out, const float* in, int64_t n, bool log) {
  using Reg = typename V::Reg;
  constexpr int64_t W = V::kWidth;
  // Pass 1: the row max (a NaN need not win here: it reaches every output
  // through the sum below).
  float max = in[0];
  int64_t i = 0;
  if (n >= W) {
    Reg m = V::load(in);
    for (i = W; i + W <= n; i += W) m = V::max_raw(m, V::load(in + i));
    max = V::reduce_max(m);
  }
  for (; i < n; ++i) max = in[i] > max ? in[i] : max;

  // Pass 2: sum of exp(x - max); softmax keeps the exponentials in out. The
  // last partial vector is masked, so short rows (n = 10) stay vectorised.
  Reg vmax = V::set1(max);
  Reg acc0 = V::zero(), acc1 = V::zero();
  for (i = 0; i + 2 * W <= n; i += 2 * W) {
    Reg e0 = exp_cephes<V>(V::sub(V::load(in + i), vmax));
    Reg e1 = exp_cephes<V>(V::sub(V::load(in + i + W), vmax));
    if (!log) {
      V::store(out + i, e0);
      V::store(out + i + W, e1);
    }
    acc0 = V::add(acc0, e0);
    acc1 = V::add(acc1, e1);
  }
  for (; i < n; i += W) {
    typename V::Tail tail = V::tail_mask(n - i);
    Reg e = exp_cephes<V>(V::sub(V::load_tail(in + i, tail), vmax));
    e = V::zero_outside(tail, e);  // lanes past the end add 0
    if (!log) V::store_tail(out + i, tail, e);
    acc0 = V::add(acc0, e);
  }
  float sum = V::reduce_add(V::add(acc0, acc1));

  // Pass 3: scale, or subtract the log of the sum.
  if (log) {
    float log_sum = std::log(sum);
    Reg vlog = V::set1(log_sum);
    for (i = 0; i + W <= n; i += W) V::store(out + i, V::sub(V::sub(V::load(in + i), vmax), vlog));
    for (; i < n; ++i) out[i] = (in[i] - max) - log_sum;
    return;
  }
  float inv_sum = 1.0f / sum;
  Reg inv = V::set1(inv_sum);
  for (i = 0; i + W <= n; i += W) V::store(out + i, V::mul(V::load(out + i), inv));
  for (; i < n; ++i) out[i] *= inv_sum;
}

}  // namespace
}  // namespace kiln::cpu::vec
