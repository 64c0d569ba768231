// Memory layouts beyond row-major: a tensor whose elements fill their span
// exactly once in some order of its dims ("dense"), such as the
// channels-last (N, C, H, W) tensors the CPU's int8 convolution writes.
//
// Note [Channels-last quantized activations]
// A channels-last tensor keeps the shape (N, C, H, W) and the meaning of
// every index; only its strides change, to (H*W*C, 1, W*C, C): the C values
// of one pixel are adjacent. The int8 GEMM convolution reads its input a
// pixel at a time (each patch row is kh runs of kw*C bytes) and writes its
// output a pixel at a time (one GEMM row is one output pixel's channels),
// so with channels-last activations it copies rows in and stores rows out,
// where NCHW costs a byte-by-byte transpose on the way in and a gather per
// channel on the way out. So the CPU kernels write a convolution's quint8
// output channels-last where that is their natural order
// (QuantizedKernels::conv2d_channels_last), and the quantized ops that
// follow a convolution (ReLU, add, pooling) keep the layout they are given
// (empty_like_layout) and run over it without copies. Every other op sees an
// ordinary strided tensor: a reshape or contiguous() makes the row-major copy
// where one is needed, as for any transposed view. PyTorch's x86 int8
// convolution makes the same choice (its output is channels-last).
//
//   Tensor y = empty_channels_last({64, 16, 32, 32}, DType::UInt8);  // y.stride(1) == 1
//   Tensor r = empty_like_layout(y, {DType::UInt8, y.device()});     // channels-last too
//   flat_view(r);                                                    // (64*16*32*32), stride 1
#pragma once

#include <optional>
#include <vector>

#include "tensor/tensor.h"

namespace kiln {

// The order of t's dims in memory, outermost first, when t's elements fill
// a span of numel() elements exactly once (size-1 dims, whose strides mean
// nothing, come first); nullopt for a tensor with gaps, overlaps or
// broadcast dims.
std::optional<std::vector<int64_t>> dense_dim_order(const Tensor& t);

// An uninitialised tensor of t's shape with `options`, its dims in t's
// memory order when t is dense (dense_dim_order), row-major otherwise.
Tensor empty_like_layout(const Tensor& t, TensorOptions options);

// A 4-d (N, C, H, W) tensor with channels-last strides (H*W*C, 1, W*C, C).
Tensor empty_channels_last(const Shape& nchw, TensorOptions options = {});

// Whether t is 4-d with channels-last strides (size-1 dims may have any stride).
bool is_channels_last(const Tensor& t);

// The elements of a dense t as one (numel) run with stride 1, in memory
// order, sharing t's storage, version counter and per-tensor QuantParams. Two
// dense tensors with the same dim order and shape have their elements at the
// same flat positions. Not an autograd view: for tensors that need no
// gradient (the quantized ops). Throws naming `op` when t is not dense or is
// quantized per channel.
Tensor flat_view(const Tensor& t, std::string_view op);

}  // namespace kiln
