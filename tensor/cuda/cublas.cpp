// cuBLAS handles and status errors (tensor/cuda/cublas.h).
#include "tensor/cuda/cublas.h"

#include "tensor/cuda/handle_pool.h"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

cublasHandle_t create_cublas_handle() {
  cublasHandle_t handle = nullptr;
  KILN_CUBLAS_CHECK(cublasCreate(&handle));
  KILN_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  return handle;
}

// Never destroyed (Note [Library handles]).
HandlePool<cublasHandle_t>& cublas_pool() {
  static auto* pool = new HandlePool<cublasHandle_t>(&create_cublas_handle);
  return *pool;
}

}  // namespace

cublasHandle_t cublas_handle(Device device) {
  cublasHandle_t handle = cublas_pool().get(device.index);
  KILN_CUBLAS_CHECK(cublasSetStream(handle, current_raw_stream(device)));
  return handle;
}

namespace detail {

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw_status_error("cuBLAS", call, cublasGetStatusName(status), cublasGetStatusString(status), file, line);
}

}  // namespace detail

}  // namespace kiln::cuda
