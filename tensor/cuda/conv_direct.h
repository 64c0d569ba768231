// Kiln's own CUDA kernels for small 2-d convolutions.
//
// Note [Direct CUDA convolution]
// cuDNN's convolution kernels are built for layers with many channels; on
// LeNet's (3 -> 6 and 6 -> 16 channels, 5x5) each call does microseconds of
// arithmetic and the choice of kernel, the descriptors and the launches of a
// general library are a large part of it: cuDNN 9's legacy calls cost the
// host 30 to 150 microseconds each. These kernels compute the convolution
// directly, for float32 and float64, with 32-bit index arithmetic inside an
// image:
// - forward (one launch): a thread per output position of one image
//   computes kDirectConvForwardTile output channels at once, so each input
//   value it loads feeds that many products; the tile's weights sit in
//   shared memory, laid out [tap][channel] so that a warp reads one
//   broadcast address per product; the bias is the sums' starting value;
// - grad_input (one launch): the same with roles swapped, a thread per
//   input position gathering, for kDirectConvGradInputTile input channels,
//   the output gradients that read it (no atomics);
// - grad_weight (one launch, two when its work is split into ranges): for
//   3- and 5-wide kernels a warp per (input channel, kernel row, group of 8
//   output channels) whose lanes walk the output positions, each load
//   feeding 8 products, then combine in a shuffle tree; for other widths a
//   block per (output channel, range of output rows) whose threads each own
//   a tap. Either also sums grad_out itself, which is the bias's gradient
//   (a tap whose input is always 1), so the bias costs no reduction of its
//   own. Ranges' sums are added in double per weight by a second kernel, a
//   warp per weight in a fixed shuffle tree.
// For 3x3 and 5x5 kernels, forward and grad_input run variants with the
// kernel size known at compile time (the taps unrolled, which of them fall
// inside the image a bit mask computed once per thread).
// The kernels and their launch shapes are in conv_direct_kernels.cuh, which
// a test also runs on the CPU (Note [Emulated kernels]).
// The split into ranges depends only on the shapes, never on the GPU, and
// no float atomics are used, so results do not vary from run to run or from
// GPU to GPU (Note [cuDNN convolution algorithms] asks the same of cuDNN's
// algorithms). They take layers whose staged weights fit the shared-memory
// limits below and whose planes have fewer than 2^31 - 256 elements, and by
// default they run every layer they take (cuda::conv_implementation(),
// tensor/cuda/settings.h): on an H100 (bench/cuda_conv_host.cpp,
// docs/BENCHMARKS.md), LeNet's layers at batch 64 and 512 cost the GPU as
// much as cuDNN's deterministic algorithms to a third of it, and the host a
// twelfth to a fifth of cuDNN's legacy calls and a third to three quarters
// of its graph API's.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::cuda {

inline constexpr size_t kDirectConvMaxWeightBytes = size_t{32} << 10;
// Output channels a thread of the forward computes, and input channels a
// thread of grad_input computes (the best of 4, 8 and 16 on an H100 for
// LeNet's layers).
inline constexpr int kDirectConvForwardTile = 8;
inline constexpr int kDirectConvGradInputTile = 4;
// What one block stages: a tile's weights, within the 48 KiB of shared
// memory every CUDA GPU gives a block without opting in.
inline constexpr size_t kDirectConvMaxStagedBytes = size_t{48} << 10;

// Whether the direct kernels take a layer of `out_channels` with params `p`
// and shape `s` in `dtype`: float32 or float64, the weight within
// kDirectConvMaxWeightBytes, a channel tile's weights within
// kDirectConvMaxStagedBytes, and input and output planes of fewer than
// 2^31 - 256 elements (a block's last thread indexes up to 255 past its
// plane's end before checking). Inline, so that a build without CUDA has it
// too: the emulation test asks it which cases the kernels take (Note
// [Emulated kernels]).
inline bool direct_conv_applies(int64_t out_channels, const Conv2dParams& p, const Conv2dShape& s, DType dtype) {
  if (dtype != DType::Float32 && dtype != DType::Float64) return false;
  const int64_t element = dtype == DType::Float64 ? 8 : 4;
  const int64_t window = s.kernel.h * s.kernel.w, weights = out_channels * s.channels * window;
  if (weights <= 0 || weights * element > static_cast<int64_t>(kDirectConvMaxWeightBytes)) return false;
  // The channel tiles' staged weights: forward [taps][tile], grad_input [OC * window][tile].
  const int64_t staged =
      std::max(s.channels * kDirectConvForwardTile, out_channels * kDirectConvGradInputTile) * window * element;
  if (staged > static_cast<int64_t>(kDirectConvMaxStagedBytes)) return false;
  // Positions along an axis, padding and taps included, stay within int.
  const int64_t out_h = s.output.h, out_w = s.output.w;
  const bool rows_fit = s.input.h + 2 * p.padding.h + p.dilation.h * s.kernel.h + p.stride.h <= INT_MAX;
  const bool columns_fit = s.input.w + 2 * p.padding.w + p.dilation.w * s.kernel.w + p.stride.w <= INT_MAX;
  const int64_t plane_limit = INT_MAX - 256;
  return out_h > 0 && out_w > 0 && rows_fit && columns_fit && s.input.h * s.input.w <= plane_limit &&
         out_h * out_w <= plane_limit;
}

// All tensors contiguous, on one CUDA device, of one dtype.
// out (N, OC, oh, ow) = conv(x (N, C, H, W), weight (OC, C*kh*kw)) + bias
// (OC), bias undefined for none.
void direct_conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Conv2dParams& p, const Conv2dShape& s);
// grad_input (N, C, H, W) from grad_out (N, OC, oh, ow) and weight (OC, C*kh*kw).
void direct_conv2d_grad_input(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                              const Conv2dParams& p, const Conv2dShape& s);
// grad_weight (OC, C*kh*kw) from grad_out (N, OC, oh, ow) and x (N, C, H, W),
// and in the same pass grad_bias (OC), the sum of grad_out over (N, oh, ow),
// when it is defined.
void direct_conv2d_grad_weight(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                               const Tensor& x, const Conv2dParams& p, const Conv2dShape& s);

}  // namespace kiln::cuda
