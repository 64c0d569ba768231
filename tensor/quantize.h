// Quantized tensors: making them, reading them, and turning them back into
// float32.
//
// A quantized tensor is a UInt8 (quint8), Int8 (qint8) or Int32 (qint32)
// tensor that carries QuantParams (tensor.h): real = scale * (q - zero_point),
// with one scale and zero point (per tensor) or one per index of `axis` (per
// channel). Tensor::is_quantized() tells them from plain integer tensors.
// The params travel with the tensor through views (a per-channel axis is
// renumbered when dims move, and a view that drops or mixes the axis is an
// error), clone, contiguous, to and safetensors files; every rounding is
// Note [Quantization arithmetic]'s (tensor/quant_math.h).
//
//   Tensor q = ops::quantize_per_tensor(x, 0.05, 128, DType::UInt8);    // quint8
//   Tensor w = ops::quantize_per_channel(w_f, scales, zero_points, 0, DType::Int8);
//   Tensor back = ops::dequantize(q);                                    // float32
//   Tensor raw = ops::int_repr(q);                                       // plain uint8
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace kiln::ops {

// x: float32 (other floating dtypes are converted first); dtype UInt8, Int8
// or Int32; scale > 0 and finite; zero_point within dtype's range.
Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype);
// The same, clamped to [quant_min, quant_max] inside dtype's range: what a
// FakeQuantize with a narrower grid (reduce_range) gives, as integers.
Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype, int64_t quant_min,
                           int64_t quant_max);
// One scale and zero point per index of x's dim `axis` (negative counts from
// the end).
Tensor quantize_per_channel(const Tensor& x, std::vector<double> scales, std::vector<int64_t> zero_points,
                            int64_t axis, DType dtype);
// The general form: params already built (and checked against x's shape).
Tensor quantize(const Tensor& x, std::shared_ptr<const QuantParams> params, DType dtype);

// float32, same shape.
Tensor dequantize(const Tensor& q);
// The integers as a plain (unquantized) tensor of q's dtype, a copy.
Tensor int_repr(const Tensor& q);
// q's values on another per-tensor grid, same dtype (dequantize, then quantize).
Tensor requantize(const Tensor& q, double scale, int64_t zero_point);

// The scale and zero point of a per-tensor quantized tensor; throw naming
// `op` for a per-channel or unquantized one.
double q_scale(const Tensor& q, std::string_view op = "q_scale");
int64_t q_zero_point(const Tensor& q, std::string_view op = "q_zero_point");

// Throws kiln::Error naming `op` and `what` ("input", "weight") unless t is
// quantized; check_not_quantized the reverse (a float op given an int8
// tensor: "conv2d: input is a quantized tensor (quint8); dequantize it first").
void check_quantized(const Tensor& t, std::string_view op, std::string_view what);
void check_not_quantized(const Tensor& t, std::string_view op, std::string_view what);

// "quint8", "qint8", "qint32": the torch names, for messages.
std::string_view quantized_dtype_name(DType dtype);

}  // namespace kiln::ops
