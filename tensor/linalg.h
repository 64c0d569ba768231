// Matrix products on Kiln's own GEMM (tensor/cpu/gemm.h on the CPU).
#pragma once

#include "tensor/tensor.h"

namespace kiln::ops {

// torch.matmul semantics: 1-d x 1-d is a dot product; 2-d x 2-d a matrix
// product; 1-d operands get a dim prepended/appended and removed again;
// batch dims (all but the last two) broadcast.
//   matmul(x (64, 400), w.t() (400, 120)) -> (64, 120)
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // 2-d only
Tensor bmm(const Tensor& a, const Tensor& b);  // 3-d only, equal batch sizes
// x (*, in) @ weight (out, in)^T + bias (out), as torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln::ops
