// The throwing halves of the CUDA check macros (Note [CUDA status checks]).
#include "tensor/cuda/check.h"

#include <string>

namespace kiln::cuda::detail {

void throw_status_error(const char* library, const char* call, const char* status_name, const char* description,
                        const char* file, int line) {
  kiln::detail::throw_error(file, line,
                            kiln::detail::str(library, " error: ", call, " failed with ", status_name, " (",
                                              description, ")"));
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  throw_status_error("CUDA", call, cudaGetErrorName(status), cudaGetErrorString(status), file, line);
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) [[likely]] return;
  std::string call = std::string("launching ") + kernel;
  throw_status_error("CUDA", call.c_str(), cudaGetErrorName(status), cudaGetErrorString(status), file, line);
}

bool refused_by_capture(cudaError_t status) {
  return status == cudaErrorStreamCaptureUnsupported || status == cudaErrorStreamCaptureImplicit ||
         status == cudaErrorCapturedEvent || status == cudaErrorStreamCaptureInvalidated ||
         status == cudaErrorStreamCaptureWrongThread;
}

}  // namespace kiln::cuda::detail
