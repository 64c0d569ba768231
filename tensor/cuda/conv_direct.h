// Kiln's own CUDA kernels for small 2-d convolutions.
//
// Note [Direct CUDA convolution]
// cuDNN's convolution kernels are built for layers with many channels; on
// LeNet's (3 -> 6 and 6 -> 16 channels, 5x5) each call does microseconds of
// arithmetic and the choice of kernel, the descriptors and the launches of a
// general library are a large part of it: cuDNN 9's legacy calls cost the
// host 30 to 130 microseconds each (docs/BENCHMARKS.md). These kernels
// compute the convolution directly, for float32 and float64, with 32-bit
// index arithmetic inside an image and no division in their inner loops:
// - forward (one launch): a thread per output position of one image
//   computes kChannelTile output channels at once, so each input value it
//   loads feeds kChannelTile products; the tile's weights sit in shared
//   memory, laid out [tap][channel] so that a warp reads one broadcast
//   address per product; the bias is the sums' starting value;
// - grad_input (one launch): the same with roles swapped, a thread per
//   input position gathering, for kChannelTile input channels, the output
//   gradients that read it (no atomics);
// - grad_weight (one launch, two when the rows are split): a block per
//   (output channel, range of the N*oh output rows) whose threads each own
//   one tap (c, ki, kj) and walk the range, accumulating in the data's
//   type; one more thread sums grad_out itself, which is the bias's
//   gradient (a tap whose input is always 1), so the bias costs no
//   reduction of its own. With several ranges, each writes its sums and a
//   second kernel adds them in double per weight, a warp per weight in a
//   fixed shuffle tree.
// The kernels and their launch shapes are in conv_direct_kernels.cuh, which
// a test also runs on the CPU (Note [Emulated kernels]).
// The number of ranges depends only on the shapes, never on the GPU, and no
// float atomics are used, so results do not vary from run to run or from
// GPU to GPU (Note [cuDNN convolution algorithms] asks the same of cuDNN's
// algorithms). They take layers whose staged weights fit the shared-memory
// limits below and whose planes have fewer than 2^31 elements. Which
// kernels run is cuda::conv_implementation() (tensor/cuda/settings.h):
// cuDNN by default until a benchmark on a GPU has shown where these are
// faster (docs/BENCHMARKS.md, issue 5).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::cuda {

inline constexpr size_t kDirectConvMaxWeightBytes = size_t{32} << 10;
// Output (forward) or input (grad_input) channels one thread computes.
inline constexpr int kDirectConvChannelTile = 4;
// What one block stages: a tile's weights, within the 48 KiB of shared
// memory every CUDA GPU gives a block without opting in.
inline constexpr size_t kDirectConvMaxStagedBytes = size_t{48} << 10;

// Whether the direct kernels take a layer of `out_channels` with geometry
// `g` in `dtype`: float32 or float64, the weight within
// kDirectConvMaxWeightBytes, a channel tile's weights within
// kDirectConvMaxStagedBytes, and input and output planes with fewer than
// 2^31 elements.
bool direct_conv_applies(int64_t out_channels, const ConvGeometry& g, DType dtype);

// All tensors contiguous, on one CUDA device, of one dtype.
// out (N, OC, oh, ow) = conv(x (N, C, H, W), weight (OC, C*kh*kw)) + bias
// (OC), bias undefined for none.
void direct_conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const ConvGeometry& g);
// grad_input (N, C, H, W) from grad_out (N, OC, oh, ow) and weight (OC, C*kh*kw).
void direct_conv2d_grad_input(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                              const ConvGeometry& g);
// grad_weight (OC, C*kh*kw) from grad_out (N, OC, oh, ow) and x (N, C, H, W),
// and in the same pass grad_bias (OC), the sum of grad_out over (N, oh, ow),
// when it is defined.
void direct_conv2d_grad_weight(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                               const Tensor& x, const ConvGeometry& g);

}  // namespace kiln::cuda
