// Kiln dtypes as CUDA device code sees them.
//
// Kiln's Half and BFloat16 (tensor/half.h) are host types whose conversions
// are bit manipulations; on the device the same 16 bits are CUDA's __half and
// __nv_bfloat16, whose conversion intrinsics round to nearest even as Kiln's
// do. Conversions go through the compute type (float for the 16-bit floats),
// exactly as the CPU copy does, so CPU and CUDA produce the same bits for
// every non-NaN value (NaN payloads may differ).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "tensor/dtype.h"
#include "tensor/numeric_cast.h"

namespace kiln::cuda {

template <class T> struct DeviceTypeOf { using type = T; };
template <> struct DeviceTypeOf<Half> { using type = __half; };
template <> struct DeviceTypeOf<BFloat16> { using type = __nv_bfloat16; };
// The device type stored for Kiln's C++ type T (same size and bits).
template <class T> using DeviceType = typename DeviceTypeOf<T>::type;

static_assert(sizeof(DeviceType<Half>) == sizeof(Half) && sizeof(DeviceType<BFloat16>) == sizeof(BFloat16));

// The value in the type kernels compute in (ComputeType in tensor/dtype.h).
template <class T>
__device__ inline T to_compute(T value) {
  return value;
}
__device__ inline float to_compute(__half value) { return __half2float(value); }
__device__ inline float to_compute(__nv_bfloat16 value) { return __bfloat162float(value); }

// A computed value stored as D; the 16-bit floats round from float, so a
// double rounds twice (double -> float -> half), as on the CPU, and floats
// become integers as on the CPU (Note [Float to integer conversion]).
template <class D, class C>
__device__ inline D from_compute(C value) {
  if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(value));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(value));
  } else {
    return numeric_cast<D>(value);
  }
}

// Kernels that only move bits (copy without conversion, fill) are
// instantiated per element width, not per dtype: four kernels instead of nine.
template <size_t bytes> struct BitsOfSize;
template <> struct BitsOfSize<1> { using type = uint8_t; };
template <> struct BitsOfSize<2> { using type = uint16_t; };
template <> struct BitsOfSize<4> { using type = uint32_t; };
template <> struct BitsOfSize<8> { using type = uint64_t; };
// The unsigned integer with the same width as T.
template <class T> using BitsOf = typename BitsOfSize<sizeof(T)>::type;

// Calls fn.template operator()<B>() with B the unsigned type of `dtype`'s width.
template <class Fn>
decltype(auto) visit_element_bits(DType dtype, Fn&& fn) {
  switch (element_size(dtype)) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    case 8: return fn.template operator()<uint64_t>();
    default: break;
  }
  KILN_FAIL("visit_element_bits: no kernel for ", dtype, " (", element_size(dtype), "-byte elements)");
}

}  // namespace kiln::cuda
