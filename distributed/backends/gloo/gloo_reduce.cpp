#include "distributed/backends/gloo/gloo_reduce.h"

#include <cmath>
#include <type_traits>

#include "tensor/error.h"

namespace kiln::distributed::gloo_backend {

namespace {

// Signed overflow is undefined in C++, so integers add and multiply in the
// unsigned type of their width and convert back (wrapping, as PyTorch's).
template <class T>
T wrapping_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

template <class T>
T wrapping_multiply(T a, T b) {
  // uint8 * uint8 promotes to int and may overflow it; unsigned int does not.
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

template <class C>
C nan_max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}

template <class C>
C nan_min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

// c[i] = combine(a[i], b[i]) in T's compute type (float for float16 and
// bfloat16), rounded back to T.
template <class T, class Combine>
ReduceFunction elementwise(Combine combine) {
  return [combine](void* c, const void* a, const void* b, size_t n) {
    using C = ComputeType<T>;
    T* out = static_cast<T*>(c);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    for (size_t i = 0; i < n; ++i) out[i] = T(combine(static_cast<C>(x[i]), static_cast<C>(y[i])));
  };
}

template <class T>
ReduceFunction typed_reduce_function(ReduceOp op) {
  using C = ComputeType<T>;
  switch (op) {
    case ReduceOp::Sum:
      if constexpr (std::is_integral_v<C>) {
        return elementwise<T>([](C a, C b) { return wrapping_add(a, b); });
      } else {
        return elementwise<T>([](C a, C b) { return a + b; });
      }
    case ReduceOp::Product:
      if constexpr (std::is_integral_v<C>) {
        return elementwise<T>([](C a, C b) { return wrapping_multiply(a, b); });
      } else {
        return elementwise<T>([](C a, C b) { return a * b; });
      }
    case ReduceOp::Max:
      return elementwise<T>([](C a, C b) { return nan_max(a, b); });
    case ReduceOp::Min:
      return elementwise<T>([](C a, C b) { return nan_min(a, b); });
    case ReduceOp::Avg:
      break;
  }
  KILN_FAIL("gloo: ReduceOp ", reduce_op_name(op),
            " reached the backend; the front-end must turn avg into a sum and a division");
}

ReduceFunction bool_reduce_function(ReduceOp op) {
  if (op == ReduceOp::Max) return elementwise<bool>([](bool a, bool b) { return a || b; });
  if (op == ReduceOp::Min) return elementwise<bool>([](bool a, bool b) { return a && b; });
  KILN_FAIL("gloo: bool tensors can only be reduced with max (logical or) or min (logical and), not ",
            reduce_op_name(op));
}

}  // namespace

ReduceFunction reduce_function(DType dtype, ReduceOp op) {
  return visit_dtype(dtype, [&]<class T>() -> ReduceFunction {
    if constexpr (std::is_same_v<T, bool>) {
      return bool_reduce_function(op);
    } else {
      return typed_reduce_function<T>(op);
    }
  });
}

}  // namespace kiln::distributed::gloo_backend
