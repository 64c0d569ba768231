// The CUDA backend's plain GEMM kernel, for what cuBLAS does not cover.
//
// cuBLAS multiplies floating matrices only, and the CPU backend also
// multiplies integer and bool ones (accumulating in int64), so the CUDA
// backend does too, with one thread per output element: nothing
// performance-critical multiplies integer matrices. The same kernel covers
// K = 0 (c = beta * c), which cuBLAS's documentation leaves unspecified.
// This header does not include the CUDA runtime.
#pragma once

#include "tensor/tensor.h"

namespace kiln::cuda {

// c = alpha * a @ b + beta * c on c's device (current) and the thread's
// current stream, every dtype: a (B, M, K), b (B, K, N), c (B, M, N), any
// strides. Integers and bool accumulate in int64 and store
// T(alpha * sum + beta * c) as the CPU backend does (T(sum) when alpha = 1
// and beta = 0); floats accumulate in float32, float64 in float64. When
// beta == 0 c's old contents are not read.
void reference_gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta);

}  // namespace kiln::cuda
