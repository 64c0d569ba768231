// KILN_CUDA_CHECK: turns a failed CUDA runtime call into a kiln::Error.
//
// Note [CUDA status checks]
// Every call into a CUDA library returns a status that must be looked at;
// one that is ignored surfaces later as a wrong result or as an error blamed
// on an unrelated call. Each library gets one macro of the same shape,
//   KILN_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
// which throws kiln::Error naming the call as written, the library's name and
// description of the status, and the file:line of the call. The cuBLAS,
// cuDNN and NCCL macros (KILN_CUBLAS_CHECK, ...) follow this pattern with their
// own *GetErrorString and go through the same detail::throw_status_error.
//
// A failed runtime call also leaves its status as the thread's "last error",
// where the next kernel launcher's check would find it and blame itself;
// throw_cuda_error clears it first. Sticky errors (a kernel that faulted)
// cannot be cleared and keep being reported, which is the truth: the CUDA
// context is unusable after them.
#pragma once

#include <cuda_runtime.h>

#include "tensor/error.h"

namespace kiln::cuda::detail {

// Throws kiln::Error: "<library> error: <call> failed with <name> (<description>)".
[[noreturn]] void throw_status_error(const char* library, const char* call, const char* status_name,
                                     const char* description, const char* file, int line);

// Clears the thread's last-error slot and throws for a failed runtime call.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);

// Throws if the kernel launch just made failed (bad configuration, no kernel
// image for this GPU); `kernel` names it in the message.
void check_launch(const char* kernel, const char* file, int line);

// Whether `status` is a running CUDA graph capture refusing the call (an
// event query, a wait, a free, made while any thread captures): the call's
// work is not done, and nothing is broken past the capture.
bool refused_by_capture(cudaError_t status);

}  // namespace kiln::cuda::detail

#define KILN_CUDA_CHECK(call)                                                               \
  do {                                                                                      \
    const cudaError_t kiln_cuda_status_ = (call);                                           \
    if (kiln_cuda_status_ != cudaSuccess) [[unlikely]]                                      \
      ::kiln::cuda::detail::throw_cuda_error(kiln_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After every <<<...>>> launch: KILN_CUDA_CHECK_LAUNCH("fill_kernel");
#define KILN_CUDA_CHECK_LAUNCH(kernel) ::kiln::cuda::detail::check_launch(kernel, __FILE__, __LINE__)
