// ConvGeometry (tensor/backend.h) with its output size resolved, in the
// plain form CUDA kernels take by value: im2col.cu and conv_direct.cu.
#pragma once

#include <cstdint>

#include "tensor/backend.h"

namespace kiln::cuda {

struct DeviceGeometry {
  int64_t channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t out_h, out_w;
};

inline DeviceGeometry device_geometry(const ConvGeometry& g) {
  return {g.channels, g.height,   g.width,      g.kernel_h,   g.kernel_w,  g.stride_h, g.stride_w,
          g.pad_h,    g.pad_w,    g.dilation_h, g.dilation_w, g.out_h(),   g.out_w()};
}

}  // namespace kiln::cuda
