// The checks every 2-d convolution front-end shares (the float conv2d of
// tensor/conv.cpp, the int8 ones of tensor/quantized_ops.cpp): x against the
// weight's shape, groups and Conv2dParams, with errors naming `op`.
#pragma once

#include <string_view>

#include "tensor/backend.h"
#include "tensor/conv.h"

namespace kiln::ops {

// x (N, C, H, W) or (C, H, W), weight (OC, C/groups, kh, kw): the geometry of
// one group (channels = C / groups), checked to have an output.
ConvGeometry conv2d_group_geometry(const Tensor& x, const Tensor& weight, const Conv2dParams& p, std::string_view op);

}  // namespace kiln::ops
