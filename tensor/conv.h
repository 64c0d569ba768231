// 2-d convolution: its settings (Conv2dParams) and the sizes they give
// (Conv2dShape), conv2d and its backward, and the im2col / col2im (unfold
// and fold) that turn it into GEMMs.
//
// For x (N, C, H, W) and a kh x kw kernel, im2col gives
// cols (N, C*kh*kw, oh*ow), so that weight (OC, C*kh*kw) @ cols[n] is output
// image n (OC, oh*ow), already in NCHW order. col2im is its adjoint (used by
// the convolution backward): overlapping patches are summed.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/size2d.h"
#include "tensor/tensor.h"

namespace kiln {

// Note [One convolution parameter struct]
// A 2-d convolution's settings are one Conv2dParams from the layer down to
// the kernel: nn::Conv2d holds one (built from its arguments or its
// Conv2dOptions), F::conv2d takes it, ops::conv2d checks it, and the
// backend's kernels receive that same object. No layer converts it into
// another form, so a setting is named the same way everywhere (the kernel
// reads p.stride.h where the user wrote .stride({2, 1})), and a new one is
// added in one place and reaches every kernel.
//
// What a kernel needs besides the settings are sizes that exist only once
// there are tensors: one group's input channels, the input's height and
// width, the kernel's, and the output's that follow from them. Those are
// Conv2dShape, computed once by the front-end from the tensors and the
// params (conv2d_shape; checked by conv2d_group_shape of
// tensor/conv_shape.h) and passed beside the params. They are not fields of
// the params struct because a layer has settings long before it has an
// input: one struct holding both would carry sizes that mean nothing until
// forward, or would be rebuilt per call by copying the settings into a
// bigger struct, the conversion this avoids. The output size is computed in
// one place (conv_output_size), so no kernel derives it again.
//
// The float kernels (Backend::conv2d, conv2d_backward, im2col, col2im) see
// one group: the front-end in tensor/conv.cpp slices x, weight and out per
// group and calls them once each, so they ignore p.groups. The int8 kernels
// (tensor/quantized_kernels.h) take all groups in one call and read it.
//
// The ops built on conv2d take the struct too: conv_transpose2d, conv2d's
// input gradient run forward, takes the Conv2dParams of the conv2d it is the
// adjoint of and its own output_padding; conv1d, conv2d on a height-1 image,
// runs with {.stride = {1, s}, .padding = {0, p}, .dilation = {1, d}}; the
// int8 conv (tensor/quantized_ops.h) and the quantized layers of quant/
// take and hold the same struct. A form of its own appears only inside a
// backend, where a library or a kernel needs one: cuDNN's int descriptors,
// and the 32-bit Geometry32 the direct CUDA kernels index with. The CPU
// kernels' plans (DirectConvPlan, the int8 ConvPlan) keep the two structs
// as they are and add only the offsets and buffer sizes worked out from
// them. Max and average pooling follow the same rule with their options
// and a Pool2dShape (Note [One pooling parameter struct] in tensor/pool.h).

// The settings of a 2-d convolution, as torch.nn.functional.conv2d's
// arguments (padding is zero padding on both sides).
//   Conv2dParams p{.stride = 2, .padding = {1, 0}};
struct Conv2dParams {
  Size2d stride = 1;
  Size2d padding = 0;
  Size2d dilation = 1;
  int64_t groups = 1;
};

// The sizes of one group of a convolution, for the kernels (Note [One
// convolution parameter struct]); made by conv2d_shape.
struct Conv2dShape {
  int64_t channels;  // input channels of one group: C / groups
  Size2d input;      // (H, W)
  Size2d kernel;     // (kh, kw)
  Size2d output;     // (oh, ow)
};

// The output size along one dim, as torch's:
// (input + 2*padding - dilation*(kernel - 1) - 1) / stride + 1, the division
// truncating. Meaningless when the kernel spans more than the padded input,
// which truncation can hide (a size of 1): conv2d_group_shape checks the
// extent instead.
constexpr int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (input + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

// The shape of one group with `channels` input channels, an input of
// `input` and a kernel of `kernel`, its output from p.
inline Conv2dShape conv2d_shape(int64_t channels, Size2d input, Size2d kernel, const Conv2dParams& p) {
  return {channels, input, kernel,
          Size2d(conv_output_size(input.h, kernel.h, p.stride.h, p.padding.h, p.dilation.h),
                 conv_output_size(input.w, kernel.w, p.stride.w, p.padding.w, p.dilation.w))};
}

}  // namespace kiln

namespace kiln::ops {

// torch.nn.functional.unfold: x (N, C, H, W) -> cols (N, C*kh*kw, oh*ow),
// zero padding. p.groups must be 1.
Tensor im2col(const Tensor& x, Size2d kernel, const Conv2dParams& p = {});
// torch.nn.functional.fold, im2col's adjoint: cols (N, C*kh*kw, oh*ow) ->
// (N, C, H, W) for input = (H, W), overlapping patches summed.
Tensor col2im(const Tensor& cols, Size2d input, Size2d kernel, const Conv2dParams& p = {});

// Note [Convolution as per-image GEMMs]
// conv2d is im2col + GEMM (CKK = C*kh*kw, P = oh*ow). bench/conv.cpp times
// three layouts on LeNet's layers at batch 64:
// - per image: weight (OC, CKK) @ cols[n] (CKK, P), which lands in NCHW
//   order directly; each thread takes whole images and builds cols[n] in a
//   buffer of its own right before the GEMM reads it, so it is still in L2
//   (235 KB for conv1);
// - batched: cols (N, CKK, P) for the whole batch (15 MB for conv1, out to
//   L3 and back), then one batched GEMM call, weight broadcast;
// - wide: cols (CKK, N*P) and one GEMM with N*P columns, then a transpose of
//   (OC, N, P) to NCHW.
// Per image is the fastest on one thread (conv1 forward 1.7 ms vs 2.0 ms
// batched and 3.5 ms wide; backward 4.2 vs 5.9 and 7.0; conv2 within 5-20%
// of batched), and is what the CPU kernel does (tensor/cpu/conv2d.cpp). The
// backward runs the same way: each thread sums grad_weight over its images
// in a block of its own (added in a fixed order afterwards), and grad_input
// is col2im(weight^T @ grad_out[n]) image by image. Groups loop over channel
// slices of x, weight and out, one kernel call each.

// torch.nn.functional.conv2d: x (N, C, H, W) or unbatched (C, H, W), weight
// (OC, C/groups, kh, kw), bias (OC) or undefined -> (N, OC, oh, ow) (or
// (OC, oh, ow)), oh and ow from conv_output_size.
// Floating dtypes only, all operands of one dtype and device; float16 and
// bfloat16 compute in float32.
//   Tensor y = conv2d(x, w, b, {.padding = 2});  // 5x5 "same" convolution
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dParams& p = {});

struct Conv2dGrads {
  Tensor grad_input, grad_weight, grad_bias;  // undefined where not asked for
};
// Gradients of conv2d's output w.r.t. x, weight and bias, for the entries of
// output_mask that are true. grad_out has conv2d's output shape, any strides
// (an expanded gradient is fine); the gradients have the shapes of x, weight
// and (OC), and x's dtype.
Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                            std::array<bool, 3> output_mask = {true, true, true});

}  // namespace kiln::ops
