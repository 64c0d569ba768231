// The int8 ops of a converted model: conv2d and linear with fused bias, ReLU
// and requantization (static), their dynamic forms (float in and out, the
// input quantized per call), and add and cat onto an output grid. Max, average
// and adaptive average pooling and ReLU need no op of their own: ops::
// max_pool2d, avg_pool2d, adaptive_avg_pool2d and relu take quantized tensors
// and keep their grid (tensor/pool.h, tensor/elementwise.h).
//
//   auto w = ops::pack_quantized_weight(ops::quantize_per_channel(weight, scales, zps, 0, DType::Int8));
//   Tensor y = ops::quantized_conv2d(x_q, *w, bias, {.padding = 1}, 0.02, 0, /*relu=*/true);
//
// Inputs are checked here (kiln::Error naming the op: a float tensor into a
// quantized op, a qint8 activation, mismatched shapes); the kernels are the
// backend's quantized group (tensor/quantized_kernels.h).
#pragma once

#include <memory>

#include "tensor/conv.h"
#include "tensor/quantized_kernels.h"

namespace kiln::ops {

// weight: qint8, symmetric, 2-d (N, K) or 4-d (O, C/groups, kh, kw), per
// tensor or per channel along axis 0.
std::shared_ptr<const PackedQuantizedWeight> pack_quantized_weight(const Tensor& weight);

// x quint8 (M, K) or (..., K); bias float32 (N) or undefined -> quint8 (..., N)
// with the given output scale and zero point.
Tensor quantized_linear(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias, double out_scale,
                        int64_t out_zero_point, bool relu = false);
// x float32 (..., K) -> float32 (..., N); x quantized per call to quint8 from
// its own range.
Tensor quantized_linear_dynamic(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                                bool reduce_range = false);

// x quint8 (N, C, H, W) -> quint8 (N, O, oh, ow).
Tensor quantized_conv2d(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias, const Conv2dParams& p,
                        double out_scale, int64_t out_zero_point, bool relu = false);
Tensor quantized_conv2d_dynamic(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                                const Conv2dParams& p, bool reduce_range = false);
// quantized_add(quantized_conv2d(x, w, bias, p, conv.scale, conv.zero_point,
// conv.relu), residual, out_scale, out_zero_point, relu), to the byte, with
// the add done in the conv's output stage where the kernels can (a
// channels-last output, and a residual laid out as it: a conv's output, for
// one); otherwise the two ops one after the other.
Tensor quantized_conv2d_add(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                            const Conv2dParams& p, const QuantizedConvGrid& conv, const Tensor& residual,
                            double out_scale, int64_t out_zero_point, bool relu = false);

// a, b quantized, same shape and dtype -> out grid (quant_math::add_value).
Tensor quantized_add(const Tensor& a, const Tensor& b, double out_scale, int64_t out_zero_point, bool relu = false);
// Each input requantized onto the output grid, joined along dim.
Tensor quantized_cat(const std::vector<Tensor>& tensors, int64_t dim, double out_scale, int64_t out_zero_point);

}  // namespace kiln::ops
