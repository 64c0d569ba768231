// The CUDA backend object. Its kernels live one group per file beside it,
// as listed in cuda_backend.h.
#include "tensor/cuda/cuda_backend.h"

#include "tensor/cuda/allocator.h"

namespace kiln::cuda {

CudaBackend::CudaBackend() { register_cuda_allocator(); }

CudaBackend& backend() {
  static CudaBackend instance;
  return instance;
}

}  // namespace kiln::cuda
