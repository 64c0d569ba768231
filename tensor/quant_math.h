// The arithmetic of 8-bit quantization, defined once: every quantized kernel
// (scalar, AVX2, VNNI, AMX), the scalar references the tests compare them
// with, and the fake-quantization of quant/ call these functions or repeat
// exactly their sequence of float operations in SIMD.
//
// Note [Quantization arithmetic]
// A quantized value q stands for the real number scale * (q - zero_point).
// Four conversions are needed, and each is one fixed sequence of float32
// operations, so that two implementations agree to the bit rather than to a
// tolerance:
//
//   quantize     q   = clamp(nearbyint(x * inv_scale) + zero_point, lo, hi)
//   dequantize   x   = float(q - zero_point) * scale
//   requantize   q   = clamp(nearbyint(float(acc) * multiplier) + zero_point, lo, hi)
//   bias         b_q = nearbyint(double(bias) / (double(scale_x) * double(scale_w)))
//
// - `scale` is the float32 value of the double held in QuantParams
//   (scale_as_float), and inv_scale = 1.0f / scale in float32
//   (inverse_scale), as PyTorch's quantize_per_tensor; the multiplier of a
//   conv or linear is float(double(scale_x) * double(scale_w) / double(scale_y))
//   from the three float32 scales (requantize_multiplier).
// - nearbyint rounds half to even (the default rounding mode), which is what
//   cvtps2dq and roundps(_MM_FROUND_TO_NEAREST_INT) do: the SIMD paths use
//   those instructions and get the same integers.
// - The clamp is done on the rounded float, before any conversion to an
//   integer, so that no float outside the int32 range is ever converted
//   (cvtps2dq would turn it into INT32_MIN where C++ says undefined), and NaN
//   becomes `lo` (fmaxf(NaN, lo) is lo; SIMD max(x, lo) with x first gives
//   lo as well).
// - A multiply followed by an add is never fused into an FMA: the files that
//   implement these functions in SIMD are compiled with -ffp-contract=off
//   and spell out the multiply and the add.
//
// The accumulator of a conv or linear is exact int32:
//   acc = sum_k (x_q - zero_point_x) * w_q + b_q
// (weights are symmetric, zero point 0), so the only roundings are the ones
// above, and a fake-quantized model that runs these same steps computes the
// converted model's output bit for bit (Note [Bit-exact fake quantization]
// in quant/fake_quant_modules.h).
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/host_device.h"

namespace kiln::quant_math {

// The representable range of a quantized dtype: quint8 [0, 255], qint8
// [-128, 127], qint32 the int32 range. reduce_range (the observers' option,
// as PyTorch's) uses one bit less: [0, 127] and [-64, 63].
struct QRange {
  int32_t lo, hi;
};

inline QRange qrange(DType dtype, bool reduce_range = false) {
  switch (dtype) {
    case DType::UInt8: return reduce_range ? QRange{0, 127} : QRange{0, 255};
    case DType::Int8: return reduce_range ? QRange{-64, 63} : QRange{-128, 127};
    case DType::Int32: return QRange{INT32_MIN, INT32_MAX};
    default: KILN_FAIL("quantization: ", dtype, " is not a quantized dtype (uint8, int8 or int32)");
  }
}

inline float scale_as_float(double scale) { return static_cast<float>(scale); }
inline float inverse_scale(float scale) { return 1.0f / scale; }

// float(double(sx) * double(sw) / double(sy)) from the float32 scales.
inline float requantize_multiplier(float scale_x, float scale_w, float scale_y) {
  return static_cast<float>(static_cast<double>(scale_x) * static_cast<double>(scale_w) /
                            static_cast<double>(scale_y));
}

// clamp(nearbyint(x * inv_scale) + zero_point, lo, hi), as a float holding
// an integer; lo and hi are floats so that int32 ranges need no conversion.
KILN_HOST_DEVICE inline float quantize_value(float x, float inv_scale, float zero_point, float lo, float hi) {
  float r = std::nearbyint(x * inv_scale) + zero_point;
  return std::fmin(std::fmax(r, lo), hi);
}

KILN_HOST_DEVICE inline float dequantize_value(int32_t q, int32_t zero_point, float scale) {
  return static_cast<float>(q - zero_point) * scale;
}

// clamp(nearbyint(float(acc) * multiplier) + zero_point, lo, hi).
KILN_HOST_DEVICE inline int32_t requantize_value(int32_t acc, float multiplier, float zero_point, float lo,
                                                 float hi) {
  float r = std::nearbyint(static_cast<float>(acc) * multiplier) + zero_point;
  return static_cast<int32_t>(std::fmin(std::fmax(r, lo), hi));
}

// The int32 bias of a conv or linear whose input has scale sx and weight
// (output channel) scale sw: nearbyint(bias / (sx * sw)) in double,
// saturated to int32.
inline int32_t quantize_bias(float bias, float scale_x, float scale_w) {
  double r = std::nearbyint(static_cast<double>(bias) / (static_cast<double>(scale_x) * static_cast<double>(scale_w)));
  if (!(r >= static_cast<double>(INT32_MIN))) return INT32_MIN;  // also NaN
  if (r > static_cast<double>(INT32_MAX)) return INT32_MAX;
  return static_cast<int32_t>(r);
}

// The mean of a pooling window of quantized values, on the input's grid
// (pooling keeps the scale and zero point): sum_minus_zp is
// sum(q - zero_point) over the window, divisor its element count (or the
// divisor_override).
//   q = clamp(nearbyint(float(sum_minus_zp) / float(divisor)) + zero_point, lo, hi)
KILN_HOST_DEVICE inline int32_t average_value(int32_t sum_minus_zp, int32_t divisor, float zero_point, float lo,
                                              float hi) {
  float r = std::nearbyint(static_cast<float>(sum_minus_zp) / static_cast<float>(divisor)) + zero_point;
  return static_cast<int32_t>(std::fmin(std::fmax(r, lo), hi));
}

// The sum of two quantized values onto the output's grid (a residual add):
//   q = quantize_value(dequantize_value(a) + dequantize_value(b), out)
// with relu folded in as lo = max(lo, zero_point_out) (quantizing is
// monotonic and quantizes 0 to the zero point).
KILN_HOST_DEVICE inline int32_t add_value(int32_t a, int32_t zero_point_a, float scale_a, int32_t b,
                                          int32_t zero_point_b, float scale_b, float inv_scale_out,
                                          float zero_point_out, float lo, float hi) {
  float sum = dequantize_value(a, zero_point_a, scale_a) + dequantize_value(b, zero_point_b, scale_b);
  return static_cast<int32_t>(quantize_value(sum, inv_scale_out, zero_point_out, lo, hi));
}

}  // namespace kiln::quant_math
