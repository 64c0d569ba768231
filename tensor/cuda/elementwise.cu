// CUDA unary and binary elementwise kernels: the op functors, with the
// semantics of the CPU reference loops (tensor/cpu/unary.cpp, binary.cpp),
// run by the launcher of Note [Vectorised elementwise kernels].
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/cuda/kernel_errors.h"
#include "tensor/cuda/math.cuh"

namespace kiln::cuda {

namespace {

// Integer arithmetic wraps (done in the unsigned type, where overflow is
// defined); bool add/sub/mul are or/xor/and, as on the CPU.
template <class C>
__device__ inline C wrapping_add(C a, C b) {
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
__device__ inline C wrapping_sub(C a, C b) {
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
__device__ inline C wrapping_mul(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a && b;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// ---- unary ops ----

struct NegOp {
  template <class C>
  __device__ C operator()(C x) const {
    // -x, not 0 - x, for floats: -(+0.0) is -0.0 (as the CPU), 0 - (+0.0) is +0.0.
    if constexpr (std::is_floating_point_v<C>) {
      return -x;
    } else {
      return wrapping_sub(C(0), x);
    }
  }
};

struct AbsOp {
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return fabs_of(x);  // also clears the sign of -0.0
    } else if constexpr (std::is_signed_v<C>) {
      return x < C(0) ? wrapping_sub(C(0), x) : x;
    } else {
      return x;
    }
  }
};

// NaN < 0 is false, so relu keeps NaNs, as torch.
struct ReluOp {
  template <class C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_signed_v<C> || std::is_floating_point_v<C>) {
      return x < C(0) ? C(0) : x;
    } else {
      return x;
    }
  }
};

struct ExpOp {
  template <class C>
  __device__ C operator()(C x) const {
    return exp_of(x);
  }
};
struct LogOp {
  template <class C>
  __device__ C operator()(C x) const {
    return log_of(x);
  }
};
struct SqrtOp {
  template <class C>
  __device__ C operator()(C x) const {
    return sqrt_of(x);
  }
};
// 1 / sqrt rather than rsqrtf, which is 2 ulp off where the CPU is exact.
struct RsqrtOp {
  template <class C>
  __device__ C operator()(C x) const {
    return C(1) / sqrt_of(x);
  }
};
struct TanhOp {
  template <class C>
  __device__ C operator()(C x) const {
    return tanh_of(x);
  }
};

template <class C>
__device__ inline C sigmoid(C x) {
  // From e^-|x| <= 1 so that neither branch overflows.
  C e = exp_of(-fabs_of(x));
  return x < C(0) ? e / (C(1) + e) : C(1) / (C(1) + e);
}

struct SigmoidOp {
  template <class C>
  __device__ C operator()(C x) const {
    return sigmoid(x);
  }
};

// x * Phi(x) through erfc in double, as the CPU reference (see gelu_exact in
// tensor/cpu/unary.cpp for why float is not enough).
struct GeluOp {
  template <class C>
  __device__ C operator()(C x) const {
    double xd = static_cast<double>(x);
    return static_cast<C>(0.5 * xd * erfc(-xd * 0.70710678118654752440));
  }
};

// 0.5x(1 + tanh(u)) == x * sigmoid(2u), u in double, as the CPU reference.
struct GeluTanhOp {
  template <class C>
  __device__ C operator()(C x) const {
    double xd = static_cast<double>(x);
    double u = 0.79788456080286535588 * (xd + 0.044715 * xd * xd * xd);
    return static_cast<C>(xd * sigmoid(2 * u));
  }
};

struct LogicalNotOp {
  template <class C>
  __device__ bool operator()(C x) const {
    return !(x != C(0));
  }
};

// ---- binary ops ----

struct AddOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return wrapping_add(a, b);
  }
};
struct SubOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return wrapping_sub(a, b);
  }
};
struct MulOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return wrapping_mul(a, b);
  }
};
struct FloatDivOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return a / b;
  }
};

// Truncating integer division. A zero divisor cannot throw inside a kernel:
// it gives 0 and raises *error, which the host reads and throws for, as the
// CPU does. INT_MIN / -1 wraps.
struct IntegerDivOp {
  ErrorSlot zero_divisor;
  template <class C>
  __device__ C operator()(C a, C b) const {
    if (b == C(0)) {
      zero_divisor.record(0);
      return C(0);
    }
    if constexpr (std::is_signed_v<C>) {
      if (b == C(-1)) return wrapping_sub(C(0), a);
    }
    return static_cast<C>(a / b);
  }
};

// Repeated squaring in the unsigned type (wrapping); negative exponents as
// torch: 1 and -1 keep their magnitude, others give 0.
struct IntegerPowOp {
  template <class C>
  __device__ C operator()(C base, C exponent) const {
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
};

// Floating pow. A broadcast-scalar exponent takes torch's cheaper special
// cases, exactly when the CPU kernel does (so sqrt's -0 and -inf results
// match); testing the exponent per element costs nothing in a kernel that
// waits on memory, and spares a device-to-host read of it.
struct FloatPowOp {
  bool scalar_exponent;
  template <class C>
  __device__ C operator()(C x, C y) const {
    if (scalar_exponent) {
      if (y == C(2)) return x * x;
      if (y == C(3)) return x * x * x;
      if (y == C(1)) return x;
      if (y == C(0.5)) return sqrt_of(x);
      if (y == C(-0.5)) return C(1) / sqrt_of(x);
      if (y == C(-1)) return C(1) / x;
      if (y == C(-2)) return C(1) / (x * x);
    }
    return pow_of(x, y);
  }
};

// maximum/minimum propagate NaN from either side, as torch.
struct MaximumOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    if (is_nan(a) || is_nan(b)) return a + b;
    return a < b ? b : a;
  }
};

struct MinimumOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    if (is_nan(a) || is_nan(b)) return a + b;
    return b < a ? b : a;
  }
};

// a: gradient, b: relu's output.
struct ReluBackwardOp {
  template <class C>
  __device__ C operator()(C g, C y) const {
    return y > C(0) ? g : C(0);
  }
};

// gelu's derivatives in double, as the CPU reference (gelu_derivative and
// gelu_tanh_derivative in tensor/cpu/binary.cpp say why each step is there).
// The CPU takes derivatives below 2^-900 to long double, which devices lack:
// there float64 results, subnormal or products with them, keep fewer digits.
__device__ inline double quiet_nan() { return __longlong_as_double(0x7ff8000000000000LL); }

__device__ inline double gelu_derivative(double x) {
  if (!isfinite(x)) return quiet_nan();
  double a = fmin(fabs(x), 40.0);
  double hi = a * a;
  double lo = fma(a, a, -hi);
  double e = exp(-0.5 * hi);
  e -= 0.5 * lo * e;
  return 0.5 * erfc(-x * 0.70710678118654752440) + x * 0.39894228040143267794 * e;
}

__device__ inline double gelu_tanh_derivative(double x) {
  if (!isfinite(x)) return quiet_nan();
  constexpr double k = 0.79788456080286535588, c = 0.044715;
  double xc = fmin(fmax(x, -30.0), 30.0);
  double two_u = 2 * k * (xc + c * xc * xc * xc);
  double du = 2 * k * (1 + 3 * c * xc * xc);
  double e = exp(-fabs(two_u));
  double sig = (two_u < 0 ? e : 1.0) / (1 + e);
  double one_minus_sig = (two_u < 0 ? 1.0 : e) / (1 + e);
  return sig * (1 + xc * one_minus_sig * du);
}

// a: gradient, b: gelu's input; the product rounds once, to C.
struct GeluBackwardOp {
  template <class C>
  __device__ C operator()(C g, C x) const {
    return static_cast<C>(static_cast<double>(g) * gelu_derivative(static_cast<double>(x)));
  }
};

struct GeluTanhBackwardOp {
  template <class C>
  __device__ C operator()(C g, C x) const {
    return static_cast<C>(static_cast<double>(g) * gelu_tanh_derivative(static_cast<double>(x)));
  }
};

// The Bool-output ops share one kernel per dtype: the op is a kernel
// argument, the same for every thread, so the switch costs nothing in a
// memory-bound kernel and saves eight instantiations per dtype.
struct CompareOp {
  BinaryOp op;
  template <class C>
  __device__ bool operator()(C x, C y) const {
    switch (op) {
      case BinaryOp::Eq:
        return x == y;
      case BinaryOp::Ne:
        return x != y;
      case BinaryOp::Lt:
        return x < y;
      case BinaryOp::Le:
        return x <= y;
      case BinaryOp::Gt:
        return x > y;
      case BinaryOp::Ge:
        return x >= y;
      case BinaryOp::LogicalAnd:
        return (x != C(0)) && (y != C(0));
      case BinaryOp::LogicalOr:
        return (x != C(0)) || (y != C(0));
      default:
        return (x != C(0)) != (y != C(0));  // LogicalXor
    }
  }
};

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
      return "neg";
    case UnaryOp::Abs:
      return "abs";
    case UnaryOp::Exp:
      return "exp";
    case UnaryOp::Log:
      return "log";
    case UnaryOp::Sqrt:
      return "sqrt";
    case UnaryOp::Rsqrt:
      return "rsqrt";
    case UnaryOp::Relu:
      return "relu";
    case UnaryOp::Sigmoid:
      return "sigmoid";
    case UnaryOp::Tanh:
      return "tanh";
    case UnaryOp::Gelu:
      return "gelu";
    case UnaryOp::GeluTanh:
      return "gelu";
    case UnaryOp::LogicalNot:
      return "logical_not";
  }
  return "unary";
}

// T: Kiln's host type; out and in hold it (R: bool for logical_not).
template <class T, class F, class R = DeviceType<T>>
void unary_with(const char* name, const Tensor& out, const Tensor& in, const F& f) {
  launch_elementwise<R, DeviceType<T>, 1>(name, out, {in}, f);
}

template <class T>
void floating_unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  const char* name = unary_name(op);
  switch (op) {
    case UnaryOp::Neg:
      return unary_with<T>(name, out, in, NegOp{});
    case UnaryOp::Abs:
      return unary_with<T>(name, out, in, AbsOp{});
    case UnaryOp::Relu:
      return unary_with<T>(name, out, in, ReluOp{});
    case UnaryOp::Exp:
      return unary_with<T>(name, out, in, ExpOp{});
    case UnaryOp::Log:
      return unary_with<T>(name, out, in, LogOp{});
    case UnaryOp::Sqrt:
      return unary_with<T>(name, out, in, SqrtOp{});
    case UnaryOp::Rsqrt:
      return unary_with<T>(name, out, in, RsqrtOp{});
    case UnaryOp::Sigmoid:
      return unary_with<T>(name, out, in, SigmoidOp{});
    case UnaryOp::Tanh:
      return unary_with<T>(name, out, in, TanhOp{});
    case UnaryOp::Gelu:
      return unary_with<T>(name, out, in, GeluOp{});
    case UnaryOp::GeluTanh:
      return unary_with<T>(name, out, in, GeluTanhOp{});
    case UnaryOp::LogicalNot:
      break;
  }
  KILN_FAIL("unary: unexpected op ", static_cast<int>(op));
}

// Launches the integer division; a zero divisor is reported when the host
// next waits for the stream (Note [CUDA kernel errors] in kernel_errors.h).
template <class T>
void integer_divide(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device(), "div");
  const ErrorSlot zero_divisor = watch_kernel_errors(
      out.device(), current_raw_stream(out.device()),
      [](const KernelErrorValues&) -> std::string { return "div: integer division by zero"; });
  launch_elementwise<T, T, 2>("div", out, {a, b}, IntegerDivOp{zero_divisor});
}

template <class T>
void binary_typed(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  using D = DeviceType<T>;
  using C = ComputeType<T>;
  auto run = [&](const char* name, const auto& f) { launch_elementwise<D, D, 2>(name, out, {a, b}, f); };
  switch (op) {
    case BinaryOp::Add:
      return run("add", AddOp{});
    case BinaryOp::Sub:
      return run("sub", SubOp{});
    case BinaryOp::Mul:
      return run("mul", MulOp{});
    case BinaryOp::Div:
      if constexpr (std::is_same_v<T, bool>) {
        KILN_FAIL("div: not supported for bool tensors");
      } else if constexpr (std::is_integral_v<C>) {
        return integer_divide<D>(out, a, b);
      } else {
        return run("div", FloatDivOp{});
      }
    case BinaryOp::Pow:
      if constexpr (std::is_same_v<T, bool>) {
        KILN_FAIL("pow: not supported for bool tensors");
      } else if constexpr (std::is_integral_v<C>) {
        return run("pow", IntegerPowOp{});
      } else {
        return run("pow", FloatPowOp{is_broadcast_scalar(b)});
      }
    case BinaryOp::Maximum:
      return run("maximum", MaximumOp{});
    case BinaryOp::Minimum:
      return run("minimum", MinimumOp{});
    case BinaryOp::ReluBackward:
      return run("threshold_backward", ReluBackwardOp{});
    case BinaryOp::GeluBackward:
    case BinaryOp::GeluTanhBackward:
      if constexpr (!std::is_floating_point_v<C>) {
        KILN_FAIL("gelu_backward: expected a floating dtype, got ", dtype_of<T>());
      } else if (op == BinaryOp::GeluBackward) {
        return run("gelu_backward", GeluBackwardOp{});
      } else {
        return run("gelu_backward", GeluTanhBackwardOp{});
      }
    case BinaryOp::Eq:
    case BinaryOp::Ne:
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
    case BinaryOp::LogicalAnd:
    case BinaryOp::LogicalOr:
    case BinaryOp::LogicalXor:
      return launch_elementwise<bool, D, 2>("compare", out, {a, b}, CompareOp{op});
  }
  KILN_FAIL("binary: unexpected op ", static_cast<int>(op));
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in) {
  if (op == UnaryOp::LogicalNot) {
    visit_dtype(in.dtype(), [&]<class T>() { unary_with<T, LogicalNotOp, bool>("logical_not", out, in, {}); });
    return;
  }
  if (op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu) {
    visit_dtype(in.dtype(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool>) {
        KILN_FAIL(unary_name(op), ": not supported for bool tensors");
      } else if constexpr (std::is_integral_v<T>) {
        if (op == UnaryOp::Neg) return unary_with<T>("neg", out, in, NegOp{});
        if (op == UnaryOp::Abs) return unary_with<T>("abs", out, in, AbsOp{});
        return unary_with<T>("relu", out, in, ReluOp{});
      } else {
        floating_unary<T>(op, out, in);
      }
    });
    return;
  }
  visit_floating_dtype(in.dtype(), unary_name(op), [&]<class T>() { floating_unary<T>(op, out, in); });
}

void CudaBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_dtype(a.dtype(), [&]<class T>() { binary_typed<T>(op, out, a, b); });
}

}  // namespace kiln::cuda
