// cuDNN handles, data types and status errors (tensor/cuda/cudnn.h).
#include "tensor/cuda/cudnn.h"

#include "tensor/cuda/handle_pool.h"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

cudnnHandle_t create_cudnn_handle() {
  cudnnHandle_t handle = nullptr;
  KILN_CUDNN_CHECK(cudnnCreate(&handle));
  return handle;
}

// Never destroyed (Note [Library handles]).
HandlePool<cudnnHandle_t>& cudnn_pool() {
  static auto* pool = new HandlePool<cudnnHandle_t>(&create_cudnn_handle);
  return *pool;
}

}  // namespace

cudnnHandle_t cudnn_handle(Device device) {
  cudnnHandle_t handle = cudnn_pool().get(device.index);
  KILN_CUDNN_CHECK(cudnnSetStream(handle, current_raw_stream(device)));
  return handle;
}

cudnnDataType_t cudnn_data_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  KILN_FAIL("cuDNN: no cuDNN data type for ", dtype, " (floating dtypes only)");
}

bool cudnn_declined(cudnnStatus_t status) {
  const int code = static_cast<int>(status);
  return status == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER ||
         (code >= static_cast<int>(CUDNN_STATUS_NOT_SUPPORTED) &&
          code < static_cast<int>(CUDNN_STATUS_NOT_SUPPORTED) + 1000);
}

int64_t pointer_alignment(const Tensor& t) {
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t a = 1;
  while (a < 16 && address % (2 * a) == 0) a *= 2;
  return a;
}

namespace detail {

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  // cuDNN 9 keeps a message saying which parameter was wrong; it is what a
  // user needs, the status name alone ("CUDNN_STATUS_BAD_PARAM") is not.
  char message[512] = {};
  cudnnGetLastErrorString(message, sizeof message);
  throw_status_error("cuDNN", call, cudnnGetErrorString(status), message[0] ? message : "no further details", file,
                     line);
}

}  // namespace detail

}  // namespace kiln::cuda
