// CPU binary elementwise kernels: a scalar reference loop per op and dtype,
// with fast paths for contiguous and broadcast-scalar operands and the
// vectorised float32 kernels (elementwise_simd.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/elementwise_simd.h"
#include "tensor/cpu/loops.h"

namespace kiln::cpu {

BinaryF32Kernel binary_f32_kernel() {
  switch (simd_level()) {
    case SimdLevel::Avx512: return binary_f32_avx512;
    case SimdLevel::Avx2: return binary_f32_avx2;
    case SimdLevel::Scalar: break;
  }
  return nullptr;
}

namespace {

// Below this many elements a kernel stays on one thread.
constexpr int64_t kGrain = 1 << 15;

// Integer arithmetic wraps, as torch's does in practice; doing it in the
// unsigned type makes that defined behaviour instead of signed overflow.
// Bool add/mul are or/and, as torch.
template <class C>
C wrapping_add(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <class C>
C wrapping_sub(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a != b;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}

template <class C>
C wrapping_mul(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a && b;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// The front-end divides integers in float (true division); this integer
// form (truncating) exists for callers of the backend and must not trap:
// division by zero throws and INT_MIN / -1 wraps.
template <class C>
C divide(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    KILN_CHECK(b != 0, "div: integer division by zero");
    if constexpr (std::is_signed_v<C>) {
      if (b == C(-1)) return wrapping_sub(C(0), a);
    }
    return static_cast<C>(a / b);
  } else {
    return a / b;
  }
}

// Integer powers by repeated squaring in the unsigned type (wrapping);
// negative exponents follow torch: 1 and -1 keep their magnitude, others give 0.
template <class C>
C integer_pow(C base, C exponent) {
  if constexpr (std::is_signed_v<C>) {
    if (exponent < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exponent & 1) ? C(-1) : C(1);
      return 0;
    }
  }
  using U = std::make_unsigned_t<C>;
  U result = 1, square = static_cast<U>(base);
  for (U e = static_cast<U>(exponent); e != 0; e >>= 1) {
    if (e & 1) result = static_cast<U>(result * square);
    square = static_cast<U>(square * square);
  }
  return static_cast<C>(result);
}

// maximum/minimum propagate NaN from either side, as torch.
template <class C>
C maximum(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return a + b;
  }
  return a < b ? b : a;
}

template <class C>
C minimum(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return a + b;
  }
  return b < a ? b : a;
}

// gelu's derivatives, the reference for the vector kernels
// (tensor/cpu/elementwise_vec.h) and for the CUDA functors, in double, or in
// long double (F) for the tail below. Both are NaN at +-inf, as torch's
// formulas, where x phi(x) is inf * 0.
//
// Exact: gelu'(x) = Phi(x) + x phi(x), with Phi through erfc (no 1 + erf to
// cancel for negative x). a = |x| is capped where e^(-a^2/2) is 0 in F, so
// that a^2 stays finite; a^2 is split exactly (FMA) as in vec::gelu, because
// e^(-a^2/2) multiplies the rounding of a^2 by a^2/2.
template <class F>
F gelu_derivative(F x) {
  if (!std::isfinite(x)) return std::numeric_limits<F>::quiet_NaN();
  constexpr F cap = std::is_same_v<F, double> ? 40 : 160;
  F a = std::min(std::fabs(x), cap);
  F hi = a * a;
  F lo = std::fma(a, a, -hi);
  F e = std::exp(F(-0.5) * hi);
  e -= F(0.5) * lo * e;
  return F(0.5) * std::erfc(-x * F(0.707106781186547524400844362104849039L)) +
         x * F(0.398942280401432677939946059934381868L) * e;
}

// torch's approximate='tanh' derivative,
//   0.5 (1 + tanh u) + 0.5 x (1 - tanh(u)^2) k (1 + 3c x^2), u = k (x + c x^3),
// written as sig (1 + x (1 - sig) du) with sig = sigmoid(2u) and du the
// derivative of 2u (see vec::gelu_tanh_backward), sig and 1 - sig each
// from e^-|2u|. Beyond the cap the result is 1 or 0 in F, and x^3 stays
// finite.
template <class F>
F gelu_tanh_derivative(F x) {
  if (!std::isfinite(x)) return std::numeric_limits<F>::quiet_NaN();
  constexpr F k = 0.797884560802865355879892119868763737L, c = 0.044715L;
  constexpr F cap = std::is_same_v<F, double> ? 30 : 60;
  F xc = std::clamp(x, -cap, cap);
  F two_u = 2 * k * (xc + c * xc * xc * xc);
  F du = 2 * k * (1 + 3 * c * xc * xc);
  F e = std::exp(-std::fabs(two_u));
  F sig = (two_u < 0 ? e : F(1)) / (1 + e);
  F one_minus_sig = (two_u < 0 ? F(1) : e) / (1 + e);
  return sig * (1 + xc * one_minus_sig * du);
}

// g * gelu'(x), rounded once to double. Where gelu' is below 2^-900 (x under
// about -35, or -20 for the tanh form) it is subnormal in double, or its
// product with g may be normal while gelu' was not: long double's exponent
// range keeps its digits there until the one rounding of the product.
template <bool kTanh>
double gelu_backward_value(double g, double x) {
  double d = kTanh ? gelu_tanh_derivative(x) : gelu_derivative(x);
  if (std::fabs(d) < 0x1p-900) {
    long double dl = kTanh ? gelu_tanh_derivative<long double>(x) : gelu_derivative<long double>(x);
    return static_cast<double>(g * dl);
  }
  return g * d;
}

// out[i] = f(a[i], b[i]) over any strides. Runs where every operand is
// contiguous or a broadcast scalar (stride 0) take the fast loops, and for
// float32 the vector kernel `simd` (may be null) first.
template <class T, class R, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, BinaryOp op, BinaryF32Kernel simd, const F& f) {
  using C = ComputeType<T>;
  constexpr int64_t t = sizeof(T);
  StridedLoop<3> loop({&out, &a, &b});
  loop.run(kGrain, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(R) && (s[1] == t || s[1] == 0) && (s[2] == t || s[2] == 0)) {
      R* o = reinterpret_cast<R*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      const T* y = reinterpret_cast<const T*>(p[2]);
      if constexpr (std::is_same_v<T, float> && std::is_same_v<R, float>) {
        if (simd && simd(op, o, x, s[1] != 0, y, s[2] != 0, n)) return;
      }
      if (s[1] != 0 && s[2] != 0) {
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(x[i]), static_cast<C>(y[i])));
      } else if (s[1] != 0) {
        C yv = static_cast<C>(y[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(x[i]), yv));
      } else if (s[2] != 0) {
        C xv = static_cast<C>(x[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(xv, static_cast<C>(y[i])));
      } else {
        R v = static_cast<R>(f(static_cast<C>(x[0]), static_cast<C>(y[0])));
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      C x = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      C y = static_cast<C>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
      *reinterpret_cast<R*>(p[0] + i * s[0]) = static_cast<R>(f(x, y));
    }
  });
}

// True when every element of b is one value (all strides 0): pow's
// exponent from pow(x, 2.0) arrives so.
bool is_broadcast_scalar(const Tensor& b) {
  for (int64_t d = 0; d < b.dim(); ++d) {
    if (b.strides()[d] != 0 && b.shape()[d] != 1) return false;
  }
  return true;
}

// pow with a floating type: common constant exponents become cheaper
// operations (the same special cases as torch's pow kernel).
template <class T>
void floating_pow(const Tensor& out, const Tensor& a, const Tensor& b) {
  using C = ComputeType<T>;
  if (is_broadcast_scalar(b)) {
    C e = static_cast<C>(*static_cast<const T*>(b.data_ptr()));
    auto run = [&](auto f) { binary_loop<T, T>(out, a, b, BinaryOp::Pow, nullptr, f); };
    if (e == C(2)) return run([](C x, C) { return x * x; });
    if (e == C(3)) return run([](C x, C) { return x * x * x; });
    if (e == C(1)) return run([](C x, C) { return x; });
    if (e == C(0.5)) return run([](C x, C) { return std::sqrt(x); });
    if (e == C(-0.5)) return run([](C x, C) { return C(1) / std::sqrt(x); });
    if (e == C(-1)) return run([](C x, C) { return C(1) / x; });
    if (e == C(-2)) return run([](C x, C) { return C(1) / (x * x); });
  }
  binary_loop<T, T>(out, a, b, BinaryOp::Pow, nullptr, [](C x, C y) { return std::pow(x, y); });
}

template <class T>
void binary_typed(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  using C = ComputeType<T>;
  BinaryF32Kernel simd = std::is_same_v<T, float> ? binary_f32_kernel() : nullptr;
  auto nonzero = [](C x) { return x != C(0); };
  switch (op) {
    case BinaryOp::Add: return binary_loop<T, T>(out, a, b, op, simd, [](C x, C y) { return wrapping_add(x, y); });
    case BinaryOp::Sub: return binary_loop<T, T>(out, a, b, op, simd, [](C x, C y) { return wrapping_sub(x, y); });
    case BinaryOp::Mul: return binary_loop<T, T>(out, a, b, op, simd, [](C x, C y) { return wrapping_mul(x, y); });
    case BinaryOp::Div:
      if constexpr (std::is_same_v<T, bool>)
        KILN_FAIL("div: not supported for bool tensors");
      else
        return binary_loop<T, T>(out, a, b, op, simd, [](C x, C y) { return divide(x, y); });
    case BinaryOp::Pow:
      if constexpr (std::is_same_v<T, bool>)
        KILN_FAIL("pow: not supported for bool tensors");
      else if constexpr (std::is_integral_v<C>)
        return binary_loop<T, T>(out, a, b, op, nullptr, [](C x, C y) { return integer_pow(x, y); });
      else
        return floating_pow<T>(out, a, b);
    case BinaryOp::Maximum: return binary_loop<T, T>(out, a, b, op, simd, [](C x, C y) { return maximum(x, y); });
    case BinaryOp::Minimum: return binary_loop<T, T>(out, a, b, op, simd, [](C x, C y) { return minimum(x, y); });
    case BinaryOp::ReluBackward:
      return binary_loop<T, T>(out, a, b, op, simd, [](C g, C y) { return y > C(0) ? g : C(0); });
    case BinaryOp::GeluBackward:
    case BinaryOp::GeluTanhBackward:
      if constexpr (!std::is_floating_point_v<C>) {
        KILN_FAIL("gelu_backward: expected a floating dtype, got ", dtype_of<T>());
      } else {
        // 16-bit floats and float32 strided runs go through double too, and
        // round g * gelu' once more, to their dtype.
        auto value = op == BinaryOp::GeluBackward ? gelu_backward_value<false> : gelu_backward_value<true>;
        return binary_loop<T, T>(out, a, b, op, simd, [value](C g, C x) {
          return static_cast<C>(value(static_cast<double>(g), static_cast<double>(x)));
        });
      }
    case BinaryOp::Eq: return binary_loop<T, bool>(out, a, b, op, nullptr, [](C x, C y) { return x == y; });
    case BinaryOp::Ne: return binary_loop<T, bool>(out, a, b, op, nullptr, [](C x, C y) { return x != y; });
    case BinaryOp::Lt: return binary_loop<T, bool>(out, a, b, op, nullptr, [](C x, C y) { return x < y; });
    case BinaryOp::Le: return binary_loop<T, bool>(out, a, b, op, nullptr, [](C x, C y) { return x <= y; });
    case BinaryOp::Gt: return binary_loop<T, bool>(out, a, b, op, nullptr, [](C x, C y) { return x > y; });
    case BinaryOp::Ge: return binary_loop<T, bool>(out, a, b, op, nullptr, [](C x, C y) { return x >= y; });
    case BinaryOp::LogicalAnd:
      return binary_loop<T, bool>(out, a, b, op, nullptr, [&](C x, C y) { return nonzero(x) && nonzero(y); });
    case BinaryOp::LogicalOr:
      return binary_loop<T, bool>(out, a, b, op, nullptr, [&](C x, C y) { return nonzero(x) || nonzero(y); });
    case BinaryOp::LogicalXor:
      return binary_loop<T, bool>(out, a, b, op, nullptr, [&](C x, C y) { return nonzero(x) != nonzero(y); });
  }
  KILN_FAIL("binary: unexpected op ", static_cast<int>(op));
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_dtype(a.dtype(), [&]<class T>() { binary_typed<T>(op, out, a, b); });
}

}  // namespace kiln::cpu
