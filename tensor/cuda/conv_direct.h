// Kiln's own CUDA kernels for small 2-d convolutions.
//
// Note [Direct CUDA convolution]
// cuDNN's convolution kernels are built for layers with many channels; on
// LeNet's (3 -> 6 and 6 -> 16 channels, 5x5) each call does microseconds of
// arithmetic and the choice of kernel, the descriptors and the launches of a
// general library are a large part of it. These three kernels compute the
// convolution directly, one launch per direction, for float32 and float64:
// - forward: one thread per output element, summing C*kh*kw products, the
//   whole weight (OC, C*kh*kw) staged once per block in shared memory;
// - grad_input: one thread per input element, gathering the taps that read
//   it (no atomics), the weight in shared memory likewise;
// - grad_weight: one block per weight element, its threads walking the
//   (N, oh, ow) positions with neighbouring threads on neighbouring columns,
//   then a fixed-order block sum (block_reduce.cuh) in double.
// No float atomics anywhere, so results do not vary from run to run (Note
// [cuDNN convolution algorithms] asks the same of cuDNN's algorithms).
// They take layers whose weight fits in kDirectConvMaxWeightBytes of shared
// memory. Which kernels run is cuda::conv_implementation()
// (tensor/cuda/settings.h): cuDNN by default until a benchmark on a GPU has
// shown where these are faster (docs/BENCHMARKS.md, issue 5).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::cuda {

inline constexpr size_t kDirectConvMaxWeightBytes = size_t{32} << 10;

// Whether the direct kernels take a layer of `out_channels` with geometry
// `g` in `dtype` (float32 or float64, weight within the shared-memory limit).
bool direct_conv_applies(int64_t out_channels, const ConvGeometry& g, DType dtype);

// All tensors contiguous, on one CUDA device, of one dtype.
// out (N, OC, oh, ow) = conv(x (N, C, H, W), weight (OC, C*kh*kw)) + bias
// (OC), bias undefined for none.
void direct_conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const ConvGeometry& g);
// grad_input (N, C, H, W) from grad_out (N, OC, oh, ow) and weight (OC, C*kh*kw).
void direct_conv2d_grad_input(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                              const ConvGeometry& g);
// grad_weight (OC, C*kh*kw) from grad_out (N, OC, oh, ow) and x (N, C, H, W).
void direct_conv2d_grad_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                               const ConvGeometry& g);

}  // namespace kiln::cuda
