// Ops that keep their input's grid: relu and max pooling pick values that
// are already on the input's grid (or its zero point), so their outputs
// stand on it too (average pooling keeps it by rounding onto it).
//
// A quantized input (Tensor::is_quantized) is computed on its integers and
// the result carries its params; a float input carrying per-tensor params
// (fake-quantized values on a grid, quant/) is computed as any float tensor
// and its output is given the same params. ops::relu, relu_, max_pool2d,
// avg_pool2d and adaptive_avg_pool2d call these; nothing else needs to.
#pragma once

#include "tensor/tensor.h"

namespace kiln::ops {

// out, given x's params when x is a float tensor carrying per-tensor params.
Tensor keep_grid(const Tensor& x, Tensor out);

// max(q, zero_point) per element (per channel for per-channel params): the
// quantized relu; the result carries x's params.
Tensor quantized_relu(const Tensor& x);
Tensor& quantized_relu_(Tensor& x);

}  // namespace kiln::ops
