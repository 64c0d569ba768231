// KILN_NCCL_CHECK: turns a failed NCCL call into a kiln::Error (Note [CUDA
// status checks] in tensor/cuda/check.h).
//
//   KILN_NCCL_CHECK(ncclGetUniqueId(&id));
//
// The error names the call as written, NCCL's name and description of the
// status, the last error NCCL recorded (ncclGetLastError: the detail, such as
// which peer or socket failed) and the file:line of the call.
//
// On a non-blocking communicator (Note [NCCL timeouts] in communicator.h) a
// call may also return ncclInProgress, meaning "accepted, still being set up
// in NCCL's own threads". Such calls are checked with KILN_NCCL_CHECK_ISSUED,
// which lets ncclInProgress through for the Communicator to wait out.
#pragma once

#include <nccl.h>

#include <string>

namespace kiln::distributed::nccl {

// "ncclSuccess", "ncclSystemError", ...
const char* result_name(ncclResult_t result);

// "ncclRemoteError (remote process exited or there was a network error); NCCL's
// last error: ...": what a status reported by ncclCommGetAsyncError says.
std::string describe_result(ncclResult_t result);

namespace detail {
[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace kiln::distributed::nccl

#define KILN_NCCL_CHECK(call)                                                                            \
  do {                                                                                                   \
    const ncclResult_t kiln_nccl_status_ = (call);                                                       \
    if (kiln_nccl_status_ != ncclSuccess) [[unlikely]]                                                   \
      ::kiln::distributed::nccl::detail::throw_nccl_error(kiln_nccl_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define KILN_NCCL_CHECK_ISSUED(call)                                                                     \
  do {                                                                                                   \
    const ncclResult_t kiln_nccl_status_ = (call);                                                       \
    if (kiln_nccl_status_ != ncclSuccess && kiln_nccl_status_ != ncclInProgress) [[unlikely]]            \
      ::kiln::distributed::nccl::detail::throw_nccl_error(kiln_nccl_status_, #call, __FILE__, __LINE__); \
  } while (0)
