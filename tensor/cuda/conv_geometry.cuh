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

// Along one axis: the output position that reads input position `i`
// through kernel tap `k`, or -1 when none does. Output o reads input
// o*stride - pad + k*dilation, so i is read when i + pad - k*dilation is a
// non-negative multiple of stride whose quotient is a valid output. The
// gathers that sum into inputs (col2im, a convolution's grad_input) use it.
__host__ __device__ inline int64_t output_reading(int64_t i, int64_t k, int64_t pad, int64_t dilation, int64_t stride,
                                                  int64_t out) {
  const int64_t shifted = i + pad - k * dilation;
  if (shifted < 0 || shifted % stride != 0 || shifted / stride >= out) return -1;
  return shifted / stride;
}

}  // namespace kiln::cuda
