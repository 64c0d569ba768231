// im2col / col2im: the unfold and fold that turn a convolution into a GEMM.
//
// For x (N, C, H, W) and a kh x kw kernel, im2col gives
// cols (N, C*kh*kw, oh*ow), so that weight (OC, C*kh*kw) @ cols[n] is output
// image n (OC, oh*ow), already in NCHW order. col2im is its adjoint (used by
// the convolution backward): overlapping patches are summed.
#pragma once

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln {

Tensor im2col(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1);
Tensor im2col(const Tensor& x, const ConvGeometry& g);
// cols (N, C*kh*kw, oh*ow) -> (N, C, H, W) with H, W from g.
Tensor col2im(const Tensor& cols, const ConvGeometry& g);

}  // namespace kiln
