// 2-d convolution: conv2d and its backward, and the im2col / col2im (unfold
// and fold) that turn it into GEMMs.
//
// For x (N, C, H, W) and a kh x kw kernel, im2col gives
// cols (N, C*kh*kw, oh*ow), so that weight (OC, C*kh*kw) @ cols[n] is output
// image n (OC, oh*ow), already in NCHW order. col2im is its adjoint (used by
// the convolution backward): overlapping patches are summed.
#pragma once

#include <array>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::ops {

Tensor im2col(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1);
Tensor im2col(const Tensor& x, const ConvGeometry& g);
// cols (N, C*kh*kw, oh*ow) -> (N, C, H, W) with H, W from g.
Tensor col2im(const Tensor& cols, const ConvGeometry& g);

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

// Hyper-parameters of conv2d, as torch.nn.functional.conv2d's (padding is
// zero padding on both sides).
struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// torch.nn.functional.conv2d: x (N, C, H, W) or unbatched (C, H, W), weight
// (OC, C/groups, kh, kw), bias (OC) or undefined -> (N, OC, oh, ow) (or
// (OC, oh, ow)), oh = (H + 2*pad_h - dilation_h*(kh-1) - 1) / stride_h + 1.
// Floating dtypes only, all operands of one dtype and device; float16 and
// bfloat16 compute in float32.
//   Tensor y = conv2d(x, w, b, {.pad_h = 2, .pad_w = 2});  // 5x5 "same" convolution
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
