// Note [CUDA allocator]
// Device memory straight from cudaMalloc/cudaFree, with the tensor's device
// made current around each call (cudaMalloc allocates on the current
// device). This is the plain version: cudaMalloc costs tens of microseconds
// and cudaFree synchronizes the whole device, which a training step that
// allocates hundreds of temporaries cannot afford. The CUDA backend issue
// replaces it with a caching allocator (size-class bins, block splitting,
// stream-aware reuse) behind the same kiln::Allocator interface, so nothing
// above it changes.
//
// It registers itself for DeviceType::CUDA when libkiln is loaded, not only
// when the backend is first asked for: Tensor::empty on a CUDA device reaches
// the allocator before any kernel, and must say "no GPU" rather than "Kiln was
// built without CUDA".
#include "tensor/cuda/allocator.h"

#include <cuda_runtime.h>

#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"

namespace kiln::cuda {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    KILN_CHECK(device.is_cuda(), "CUDA allocator: asked for memory on ", device);
    DeviceGuard guard(device, "CUDA allocator");
    if (nbytes == 0) return nullptr;
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: the device stays usable
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
      KILN_FAIL("CUDA allocator: out of memory on ", device, ": tried to allocate ", nbytes, " bytes (",
                nbytes / kMiB, " MiB); the device has ", free_bytes / kMiB, " MiB free of ", total_bytes / kMiB,
                " MiB");
    }
    KILN_CUDA_CHECK(status);
    return ptr;
  }

  void deallocate(void* ptr, size_t, Device device) override {
    if (ptr == nullptr) return;
    // Called from Storage's destructor, so it must not throw. cudaFree fails
    // at process exit once the runtime is unloading (cudaErrorCudartUnloading;
    // the driver frees everything then) and after a sticky kernel fault, which
    // the op that caused it has already reported.
    int current = 0;
    bool switched = cudaGetDevice(&current) == cudaSuccess && current != device.index &&
                    cudaSetDevice(device.index) == cudaSuccess;
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
    if (switched && cudaSetDevice(current) != cudaSuccess) (void)cudaGetLastError();
  }
};

// Installs the allocator as libkiln is loaded (Note [CUDA allocator]).
const bool registered_at_load = [] {
  register_cuda_allocator();
  return true;
}();

}  // namespace

Allocator& cuda_allocator() {
  static CudaAllocator allocator;
  return allocator;
}

void register_cuda_allocator() { set_allocator(DeviceType::CUDA, &cuda_allocator()); }

}  // namespace kiln::cuda
