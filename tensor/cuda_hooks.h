// What libkiln asks of the CUDA backend, which lives in libkiln_cuda
// (Note [Backends as plugins] in plugin.h). The CUDA library registers one
// CudaHooks object when it is loaded; libkiln's CUDA-facing entry points
// (backend_for, cuda_status.h, the pinned allocator) go through it.
//
// Everything here is plain C++: no CUDA header is needed to call it.
#pragma once

#include <optional>
#include <string>

#include "tensor/cuda_status.h"
#include "tensor/device.h"

namespace kiln {

class Allocator;
class Backend;

namespace cuda {

class CudaHooks {
 public:
  virtual ~CudaHooks() = default;

  virtual Backend& backend() const = 0;
  // As cuda_status.h's functions of the same names.
  virtual int device_count() const = 0;
  virtual std::string unavailable_reason() const = 0;
  virtual MemoryStats memory_stats(Device device) const = 0;
  virtual void reset_peak_memory_stats(Device device) const = 0;
  virtual void synchronize(Device device) const = 0;
  // Waits for the calling thread's current stream on `device` only, as
  // Stream::synchronize: what a copy from pinned memory was queued on.
  virtual void synchronize_current_stream(Device device) const = 0;
  virtual std::optional<GpuStatus> gpu_status(int device) const = 0;
  // The page-locked host allocator; nullptr when there is no usable GPU.
  virtual Allocator* pinned_host_allocator() const = 0;
};

// Called once by libkiln_cuda's static initialiser; `hooks` lives as long as
// the process.
void register_cuda_hooks(const CudaHooks* hooks);

// The registered hooks, loading libkiln_cuda first if nothing has; nullptr
// when it cannot be loaded, and then cuda_library_error() says why.
const CudaHooks* cuda_hooks();
std::string cuda_library_error();

}  // namespace cuda
}  // namespace kiln
