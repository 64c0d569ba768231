// The throwing half of KILN_NCCL_CHECK (nccl_check.h).
#include "distributed/backends/nccl/nccl_check.h"

#include "tensor/cuda/check.h"

namespace kiln::distributed::nccl {

const char* result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    case ncclNumResults: break;
  }
  return "an unknown ncclResult_t";
}

std::string describe_result(ncclResult_t result) {
  std::string text = std::string(result_name(result)) + " (" + ncclGetErrorString(result) + ")";
  // The comm argument is unused by NCCL: the last error is kept per thread.
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += std::string("; NCCL's last error: ") + last;
  return text;
}

namespace detail {

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  std::string description = ncclGetErrorString(status);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') description += std::string("; NCCL's last error: ") + last;
  cuda::detail::throw_status_error("NCCL", call, result_name(status), description.c_str(), file, line);
}

}  // namespace detail

}  // namespace kiln::distributed::nccl
