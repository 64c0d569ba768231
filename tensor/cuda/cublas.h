// cuBLAS for the CUDA backend: the status check and the per-thread handle.
//
// KILN_CUBLAS_CHECK(cublasSgemm(...)) throws kiln::Error naming the call,
// cuBLAS's name and description of the status, and file:line (Note [CUDA
// status checks] in tensor/cuda/check.h).
#pragma once

#include <cublas_v2.h>

#include "tensor/cuda/check.h"
#include "tensor/device.h"

namespace kiln::cuda {

// The calling thread's cuBLAS handle for `device` (Note [Library handles] in
// tensor/cuda/handle_pool.h), with its stream set to the thread's current
// stream on that device. The device must be current (hold a DeviceGuard).
// Handles start with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, so
// that 16-bit products accumulate in float32 all the way, as the CPU
// backend's do; CudaBackend::gemm sets the math mode for each call's dtype.
cublasHandle_t cublas_handle(Device device);

namespace detail {
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace kiln::cuda

#define KILN_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                          \
    const cublasStatus_t kiln_cublas_status_ = (call);                                          \
    if (kiln_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                              \
      ::kiln::cuda::detail::throw_cublas_error(kiln_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)
