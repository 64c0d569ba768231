// CPU unary elementwise kernels: a scalar reference loop per op, with the
// vectorised float32 kernels (elementwise_simd.h) for contiguous runs.
#include <cmath>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/elementwise_simd.h"
#include "tensor/cpu/loops.h"

namespace kiln::cpu {

UnaryF32Kernel unary_f32_kernel() {
  switch (simd_level()) {
    case SimdLevel::Avx512: return unary_f32_avx512;
    case SimdLevel::Avx2: return unary_f32_avx2;
    case SimdLevel::Scalar: break;
  }
  return nullptr;
}

namespace {

// Below this many elements a kernel stays on one thread.
constexpr int64_t kGrain = 1 << 15;

std::string_view unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu";
    case UnaryOp::LogicalNot: return "logical_not";
  }
  return "unary";
}

// Negation that wraps for signed integers (-INT_MIN is INT_MIN, as torch)
// instead of being undefined behaviour.
template <class C>
C negate(C x) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(U(0) - static_cast<U>(x));
  } else {
    return -x;
  }
}

template <class C>
bool is_negative(C x) {
  if constexpr (std::is_unsigned_v<C>) {
    return false;
  } else {
    return x < C(0);
  }
}

template <class C>
C sigmoid(C x) {
  // From e^-|x| <= 1 so that neither branch overflows (see vec::sigmoid).
  C e = std::exp(-std::abs(x));
  return x < C(0) ? e / (C(1) + e) : C(1) / (C(1) + e);
}

template <class C>
C gelu_exact(C x) {
  // x * Phi(x) with Phi(x) = erfc(-x/sqrt(2)) / 2: erfc keeps the tiny
  // values for negative x that 1 + erf(x/sqrt(2)) would cancel to zero.
  // Float inputs go through double: erfc(z) amplifies the rounding of
  // z = -x/sqrt(2) by 2z^2, which float could not absorb.
  double xd = static_cast<double>(x);
  return static_cast<C>(0.5 * xd * std::erfc(-xd * 0.70710678118654752440));
}

template <class C>
C gelu_tanh(C x) {
  // 0.5x(1 + tanh(u)) == x * sigmoid(2u), without the cancellation. u is
  // formed in double: e^(2u) multiplies u's relative rounding error by |2u|,
  // which reaches ~100 for x = -9 (the vector kernel accepts that, as torch's
  // does; this reference loop does not).
  double xd = static_cast<double>(x);
  double u = 0.79788456080286535588 * (xd + 0.044715 * xd * xd * xd);
  return static_cast<C>(xd * sigmoid(2 * u));
}

// out[i] = f(in[i]) over any strides; `simd` (float32 only, may be null)
// takes contiguous runs.
template <class T, class R, class F>
void unary_loop(const Tensor& out, const Tensor& in, UnaryOp op, UnaryF32Kernel simd, const F& f) {
  using C = ComputeType<T>;
  StridedLoop<2> loop({&out, &in});
  loop.run(kGrain, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(R) && s[1] == sizeof(T)) {
      R* o = reinterpret_cast<R*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      if constexpr (std::is_same_v<T, float> && std::is_same_v<R, float>) {
        if (simd && simd(op, o, x, n)) return;
      }
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(x[i])));
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      C x = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      *reinterpret_cast<R*>(p[0] + i * s[0]) = static_cast<R>(f(x));
    }
  });
}

// Ops defined for every numeric dtype: neg, abs, relu.
template <class T>
void numeric_unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  using C = ComputeType<T>;
  UnaryF32Kernel simd = std::is_same_v<T, float> ? unary_f32_kernel() : nullptr;
  switch (op) {
    case UnaryOp::Neg: return unary_loop<T, T>(out, in, op, simd, [](C x) { return negate(x); });
    case UnaryOp::Abs:
      return unary_loop<T, T>(out, in, op, simd, [](C x) {
        if constexpr (std::is_floating_point_v<C>) {
          return std::fabs(x);  // also clears the sign of -0.0
        } else {
          return is_negative(x) ? negate(x) : x;
        }
      });
    // NaN < 0 is false, so relu keeps NaNs, as torch.
    case UnaryOp::Relu: return unary_loop<T, T>(out, in, op, simd, [](C x) { return is_negative(x) ? C(0) : x; });
    default: KILN_FAIL("unary: ", unary_name(op), " is not a numeric op");
  }
}

template <class T>
void floating_unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  using C = ComputeType<T>;
  UnaryF32Kernel simd = std::is_same_v<T, float> ? unary_f32_kernel() : nullptr;
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Relu: return numeric_unary<T>(op, out, in);
    case UnaryOp::Exp: return unary_loop<T, T>(out, in, op, simd, [](C x) { return std::exp(x); });
    case UnaryOp::Log: return unary_loop<T, T>(out, in, op, simd, [](C x) { return std::log(x); });
    case UnaryOp::Sqrt: return unary_loop<T, T>(out, in, op, simd, [](C x) { return std::sqrt(x); });
    case UnaryOp::Rsqrt: return unary_loop<T, T>(out, in, op, simd, [](C x) { return C(1) / std::sqrt(x); });
    case UnaryOp::Sigmoid: return unary_loop<T, T>(out, in, op, simd, [](C x) { return sigmoid(x); });
    case UnaryOp::Tanh: return unary_loop<T, T>(out, in, op, simd, [](C x) { return std::tanh(x); });
    case UnaryOp::Gelu: return unary_loop<T, T>(out, in, op, simd, [](C x) { return gelu_exact(x); });
    case UnaryOp::GeluTanh: return unary_loop<T, T>(out, in, op, simd, [](C x) { return gelu_tanh(x); });
    case UnaryOp::LogicalNot: break;
  }
  KILN_FAIL("unary: unexpected op ", static_cast<int>(op));
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  if (op == UnaryOp::LogicalNot) {
    visit_dtype(in.dtype(), [&]<class T>() {
      using C = ComputeType<T>;
      unary_loop<T, bool>(out, in, op, nullptr, [](C x) { return !(x != C(0)); });
    });
    return;
  }
  if (op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu) {
    visit_dtype(in.dtype(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool>) {
        KILN_FAIL(unary_name(op), ": not supported for bool tensors");
      } else {
        numeric_unary<T>(op, out, in);
      }
    });
    return;
  }
  visit_floating_dtype(in.dtype(), unary_name(op), [&]<class T>() { floating_unary<T>(op, out, in); });
}

}  // namespace kiln::cpu
