// numeric_cast<D>(v): a value converted to dtype D's C++ type, with the
// same result on the CPU and on CUDA for every value.
//
// Note [Float to integer conversion]
// C++ leaves a floating value converted to an integer type undefined when
// it is NaN or outside the type's range, and the hardware differs: x86
// gives the "integer indefinite" (the type's minimum) for 32- and 64-bit
// targets and, through a 32-bit convert, wraps for 8-bit ones
// (uint8(-1.0) is 255), while CUDA's convert instructions saturate
// (uint8(-1.0) is 0) and turn NaN into 0. Kiln defines x86's answers for
// both devices, which are also torch's on the CPU:
// - 32- and 64-bit targets: truncate toward zero; NaN and values outside
//   the target's range give its minimum (int32(3e9) is INT32_MIN);
// - narrower targets (8 bits): convert to int32 so, then wrap to the
//   target's width (uint8(-1.0) is 255, uint8(300.0) is 44, int8(200.0) is -56).
// Every value that fits the target converts as C++ says. Float to bool is
// v != 0 (NaN is true), well defined already; so are the other casts.
#pragma once

#include <cstdint>
#include <type_traits>

#include "tensor/host_device.h"

namespace kiln {

template <class I, class F>
KILN_HOST_DEVICE inline I float_to_integer(F v) {
  if constexpr (sizeof(I) >= 4) {
    using Signed = std::make_signed_t<I>;
    using Unsigned = std::make_unsigned_t<I>;
    constexpr Unsigned kTop = Unsigned{1} << (8 * sizeof(I) - 1);
    constexpr double kLimit = static_cast<double>(kTop);  // 2^31 or 2^63, exact
    const bool fits = v >= -kLimit && v < kLimit;          // false for NaN
    return static_cast<I>(fits ? static_cast<Signed>(v) : static_cast<Signed>(kTop));
  } else {
    return static_cast<I>(float_to_integer<int32_t>(v));
  }
}

template <class D, class S>
KILN_HOST_DEVICE inline D numeric_cast(S v) {
  if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D> && !std::is_same_v<D, bool>) {
    return float_to_integer<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

}  // namespace kiln
