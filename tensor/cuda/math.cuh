// Device math in the compute type: float or double, picked by the argument,
// so templated kernels call one name (exp_of) and get expf for float, the
// full-precision version that matches the CPU to float32 rounding (not the
// __expf intrinsic, which is several ulp off).
#pragma once

#include <type_traits>

namespace kiln::cuda {

// NaN-propagating max: a row holding a NaN has a NaN max (as on the CPU,
// where such rows give NaN through the sum), for the softmax and the cross
// entropy's rows.
template <class C>
__device__ inline C max_of(C a, C b) {
  return (b > a || b != b) ? b : a;
}

template <class C>
__device__ inline C negative_infinity() {
  if constexpr (std::is_same_v<C, float>) {
    return -__int_as_float(0x7f800000);
  } else {
    return -__longlong_as_double(0x7ff0000000000000LL);
  }
}

template <class C>
__device__ inline C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>)
    return expf(x);
  else
    return exp(x);
}

template <class C>
__device__ inline C expm1_of(C x) {
  if constexpr (std::is_same_v<C, float>)
    return expm1f(x);
  else
    return expm1(x);
}

template <class C>
__device__ inline C log_of(C x) {
  if constexpr (std::is_same_v<C, float>)
    return logf(x);
  else
    return log(x);
}

template <class C>
__device__ inline C sqrt_of(C x) {
  if constexpr (std::is_same_v<C, float>)
    return sqrtf(x);
  else
    return sqrt(x);
}

template <class C>
__device__ inline C tanh_of(C x) {
  if constexpr (std::is_same_v<C, float>)
    return tanhf(x);
  else
    return tanh(x);
}

template <class C>
__device__ inline C fabs_of(C x) {
  if constexpr (std::is_same_v<C, float>)
    return fabsf(x);
  else
    return fabs(x);
}

template <class C>
__device__ inline C pow_of(C x, C y) {
  if constexpr (std::is_same_v<C, float>)
    return powf(x, y);
  else
    return pow(x, y);
}

// False for every non-floating type, so templated code may ask any value.
template <class C>
__device__ inline bool is_nan(C x) {
  if constexpr (std::is_floating_point_v<C>)
    return x != x;
  else
    return false;
}

}  // namespace kiln::cuda
