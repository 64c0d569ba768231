// LibTorch's short names for dtypes and devices (torch::kFloat32,
// torch::kCUDA), so that code ported from LibTorch keeps reading the same:
//
//   Tensor x = randn({64, 400}, kFloat64);
//   Tensor y = x.to(kFloat32);
//   if (cuda::is_available()) y = y.to(kCUDA);
//
// Each is the DType or Device it names (kCPU is in device.h); kiln.h
// includes this header. LibTorch's C-style aliases (kFloat, kDouble, kHalf,
// kLong, kInt, kByte, kChar) are here too, meaning what they mean there.
#pragma once

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace kiln {

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;

inline constexpr DType kByte = kUInt8;
inline constexpr DType kChar = kInt8;
inline constexpr DType kInt = kInt32;
inline constexpr DType kLong = kInt64;
inline constexpr DType kHalf = kFloat16;
inline constexpr DType kFloat = kFloat32;
inline constexpr DType kDouble = kFloat64;

// The first CUDA device, as LibTorch's kCUDA (Device(DeviceType::CUDA, i) for another).
inline constexpr Device kCUDA{DeviceType::CUDA, 0};

}  // namespace kiln
