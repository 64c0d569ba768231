// Element types, their C++ counterparts, and PyTorch's type-promotion rules.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "tensor/error.h"
#include "tensor/half.h"

namespace kiln {

// Ordered by promotion category: bool < integers < floating point.
enum class DType : uint8_t { Bool, UInt8, Int8, Int32, Int64, Float16, BFloat16, Float32, Float64 };

inline constexpr int kNumDTypes = 9;

std::string_view dtype_name(DType dtype);  // "float32", "int64", ...
std::ostream& operator<<(std::ostream& os, DType dtype);

size_t element_size(DType dtype);
bool is_floating(DType dtype);
bool is_integral(DType dtype);  // integer types, not bool
bool is_signed(DType dtype);

// The dtype that a binary op on `a` and `b` computes in, as torch.promote_types:
// bool < uint8, int8 < int32 < int64 < float16, bfloat16 < float32 < float64,
// with uint8+int8 -> int16 (not provided, so int32) and float16+bfloat16 -> float32.
DType promote_types(DType a, DType b);

// The C++ type stored for each dtype.
template <DType D> struct CppTypeOf;
template <> struct CppTypeOf<DType::Bool> { using type = bool; };
template <> struct CppTypeOf<DType::UInt8> { using type = uint8_t; };
template <> struct CppTypeOf<DType::Int8> { using type = int8_t; };
template <> struct CppTypeOf<DType::Int32> { using type = int32_t; };
template <> struct CppTypeOf<DType::Int64> { using type = int64_t; };
template <> struct CppTypeOf<DType::Float16> { using type = Half; };
template <> struct CppTypeOf<DType::BFloat16> { using type = BFloat16; };
template <> struct CppTypeOf<DType::Float32> { using type = float; };
template <> struct CppTypeOf<DType::Float64> { using type = double; };
template <DType D> using CppType = typename CppTypeOf<D>::type;

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::Int8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }

// The type kernels compute in: float for the 16-bit floats, the type itself otherwise.
template <class T> struct ComputeTypeOf { using type = T; };
template <> struct ComputeTypeOf<Half> { using type = float; };
template <> struct ComputeTypeOf<BFloat16> { using type = float; };
template <class T> using ComputeType = typename ComputeTypeOf<T>::type;

// Calls fn.template operator()<T>() with T the C++ type of `dtype`:
//   visit_dtype(t.dtype(), [&]<class T>() { fill<T>(t); });
template <class Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Bool: return fn.template operator()<bool>();
    case DType::UInt8: return fn.template operator()<uint8_t>();
    case DType::Int8: return fn.template operator()<int8_t>();
    case DType::Int32: return fn.template operator()<int32_t>();
    case DType::Int64: return fn.template operator()<int64_t>();
    case DType::Float16: return fn.template operator()<Half>();
    case DType::BFloat16: return fn.template operator()<BFloat16>();
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
  }
  KILN_FAIL("visit_dtype: invalid dtype code ", static_cast<int>(dtype));
}

// As visit_dtype, restricted to the floating types; others throw naming `op`.
template <class Fn>
decltype(auto) visit_floating_dtype(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::Float16: return fn.template operator()<Half>();
    case DType::BFloat16: return fn.template operator()<BFloat16>();
    case DType::Float32: return fn.template operator()<float>();
    case DType::Float64: return fn.template operator()<double>();
    default: break;
  }
  KILN_FAIL(op, ": expected a floating point tensor, got ", dtype_name(dtype));
}

}  // namespace kiln
