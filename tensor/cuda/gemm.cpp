// CudaBackend::gemm: batched products through cublasGemmStridedBatchedEx.
//
// Note [Row-major GEMM on cuBLAS]
// cuBLAS reads column-major matrices: element (i, j) at i + j * ld. A
// row-major (M, N) matrix with rows ld apart is, read column-major, its own
// transpose (N, M). So c = a @ b is computed in one of two frames, without
// copying anything:
// - c has unit column stride (the usual, row-major c): cuBLAS computes
//   c^T (N, M) = b^T (N, K) @ a^T (K, M);
// - c has unit row stride (a transposed c): cuBLAS computes c (M, N) = a @ b.
// In either frame each operand X (rows, cols) must then be a column-major
// matrix or the transpose of one: unit row stride (op N, ld = column stride)
// or unit column stride (op T, ld = row stride). Transposed views (x.t(),
// the weight of linear) are thus read in place. An operand with neither
// unit stride (a strided slice, an expanded matrix) is first copied to
// contiguous memory; so is c, computed in a contiguous buffer and copied back.
// The batch dim maps to cuBLAS's batch stride as it is; a batch stride of 0
// broadcasts one matrix over the batch.
//
// float16 and bfloat16 accumulate in float32 (CUBLAS_COMPUTE_32F, with
// reduced-precision reductions forbidden, tensor/cuda/cublas.h); float32
// uses TF32 tensor cores only when cuda::set_allow_tf32(true) says so
// (tensor/cuda/settings.h). Integer and bool matrices, and K = 0, go to the
// plain kernel of tensor/cuda/gemm_reference.h.
#include <algorithm>

#include "tensor/cuda/cublas.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/gemm_reference.h"
#include "tensor/cuda/settings.h"

namespace kiln::cuda {

namespace {

// One operand as cuBLAS reads it in the chosen frame.
struct CublasOperand {
  const void* data = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

// How a (rows, cols) matrix with strides (row_stride, col_stride) reads as
// op(column-major matrix); false when it does not. A dim of size 1 has no
// stride to speak of, so its stride is whatever makes the layout valid.
bool as_column_major(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, cublasOperation_t& op,
                     int64_t& ld) {
  if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= std::max<int64_t>(1, rows))) {
    op = CUBLAS_OP_N;
    ld = cols == 1 ? std::max<int64_t>(1, rows) : col_stride;
    return true;
  }
  if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= std::max<int64_t>(1, cols))) {
    op = CUBLAS_OP_T;
    ld = rows == 1 ? std::max<int64_t>(1, cols) : row_stride;
    return true;
  }
  return false;
}

// `t` (B, R, C) read as a (R, C) matrix in cuBLAS's frame; `transposed`
// reads it as its transpose (C, R) instead (the c^T frame). A layout cuBLAS
// cannot read is replaced by a contiguous copy, kept alive in `keep`.
CublasOperand operand(const Tensor& t, bool transposed, Tensor& keep) {
  keep = t;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int64_t rows = keep.size(transposed ? 2 : 1), cols = keep.size(transposed ? 1 : 2);
    const int64_t row_stride = keep.stride(transposed ? 2 : 1), col_stride = keep.stride(transposed ? 1 : 2);
    CublasOperand result;
    if (as_column_major(rows, cols, row_stride, col_stride, result.op, result.ld)) {
      result.data = keep.data_ptr();
      result.batch_stride = keep.size(0) == 1 ? 0 : keep.stride(0);
      return result;
    }
    keep = keep.contiguous();
  }
  KILN_FAIL("gemm: a contiguous operand of shape ", t.shape(), " has no cuBLAS layout");
}

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float64: return CUDA_R_64F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    default: break;
  }
  KILN_FAIL("gemm: cuBLAS has no type for ", dtype);
}

// c (B, M, N) with unit stride along one of its matrix dims: the frames of
// Note [Row-major GEMM on cuBLAS].
void cublas_gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = a.size(2);
  cublasOperation_t c_op;
  int64_t ldc;
  // Frame c (M, N) = a @ b when c reads as a plain column-major matrix,
  // otherwise frame c^T (N, M) = b^T @ a^T.
  const bool direct = as_column_major(m, n, c.stride(1), c.stride(2), c_op, ldc) && c_op == CUBLAS_OP_N;
  if (!direct) {
    const bool transposed_ok = as_column_major(n, m, c.stride(2), c.stride(1), c_op, ldc) && c_op == CUBLAS_OP_N;
    KILN_CHECK(transposed_ok, "gemm: internal error: output strides ", c.strides(), " have no cuBLAS layout");
  }
  Tensor a_keep, b_keep;
  // In the c^T frame the first cuBLAS operand is b^T (N, K), the second a^T (K, M).
  const CublasOperand first = direct ? operand(a, false, a_keep) : operand(b, true, b_keep);
  const CublasOperand second = direct ? operand(b, false, b_keep) : operand(a, true, a_keep);
  const int64_t rows = direct ? m : n, cols = direct ? n : m;
  const int64_t c_batch_stride = batch == 1 ? 0 : c.stride(0);

  const DType dtype = c.dtype();
  const cudaDataType_t type = cuda_data_type(dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (dtype == DType::Float64) compute = CUBLAS_COMPUTE_64F;
  if (dtype == DType::Float32 && allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  // alpha and beta have the compute type's scalar type.
  const double alpha64 = alpha, beta64 = beta;
  const float alpha32 = static_cast<float>(alpha), beta32 = static_cast<float>(beta);
  const void* alpha_ptr = dtype == DType::Float64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta_ptr = dtype == DType::Float64 ? static_cast<const void*>(&beta64) : &beta32;

  cublasHandle_t handle = cublas_handle(c.device());
  // Forbidding reduced-precision reductions concerns outputs narrower than
  // the compute type (cuBLAS's documentation), so only 16-bit GEMMs ask for
  // it; float32 and float64 run with the default math mode, as torch's do,
  // leaving cuBLAS its whole choice of kernels.
  KILN_CUBLAS_CHECK(cublasSetMathMode(
      handle, dtype == DType::Float16 || dtype == DType::BFloat16 ? CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
                                                                   : CUBLAS_DEFAULT_MATH));
  KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle, first.op, second.op, rows, cols, k, alpha_ptr, first.data, type, first.ld,
      first.batch_stride, second.data, type, second.ld, second.batch_stride, beta_ptr, c.data_ptr(), type, ldc,
      c_batch_stride, batch, compute, CUBLAS_GEMM_DEFAULT));
}

bool cublas_writes(const Tensor& c) {
  cublasOperation_t op;
  int64_t ld;
  const int64_t m = c.size(1), n = c.size(2);
  return (as_column_major(m, n, c.stride(1), c.stride(2), op, ld) && op == CUBLAS_OP_N) ||
         (as_column_major(n, m, c.stride(2), c.stride(1), op, ld) && op == CUBLAS_OP_N);
}

}  // namespace

void CudaBackend::gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  if (c.numel() == 0) return;
  DeviceGuard guard(c.device(), "gemm");
  const bool floating = c.dtype() == DType::Float32 || c.dtype() == DType::Float64 ||
                        c.dtype() == DType::Float16 || c.dtype() == DType::BFloat16;
  if (!floating || a.size(2) == 0) {
    reference_gemm(c, a, b, alpha, beta);
    return;
  }
  if (cublas_writes(c)) {
    cublas_gemm(c, a, b, alpha, beta);
    return;
  }
  // c: (B, M, N) contiguous, holding c's old values only when they are read.
  Tensor packed = beta == 0.0 ? Tensor::empty(c.shape(), {c.dtype(), c.device()}) : c.contiguous();
  cublas_gemm(packed, a, b, alpha, beta);
  copy(c, packed);
}

}  // namespace kiln::cuda
