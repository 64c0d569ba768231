// The checks every 2-d convolution front-end shares (the float conv2d of
// tensor/conv.cpp, the int8 ones of tensor/quantized_ops.cpp): x against the
// weight's shape and the Conv2dParams, with errors naming `op`.
#pragma once

#include <string_view>

#include "tensor/conv.h"

namespace kiln::ops {

// x (N, C, H, W) or (C, H, W), weight (OC, C/groups, kh, kw): the shape of
// one group (channels = C / groups), checked to have an output.
Conv2dShape conv2d_group_shape(const Tensor& x, const Tensor& weight, const Conv2dParams& p, std::string_view op);

}  // namespace kiln::ops
