// libkiln_cuda's answers to what libkiln asks of CUDA (tensor/cuda_hooks.h),
// registered when this library is loaded (Note [Backends as plugins] in
// tensor/plugin.h).
#include "tensor/cuda_hooks.h"

#include "tensor/cuda/allocator.h"  // allocator_memory_stats
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/nvml.h"
#include "tensor/cuda/pinned_allocator.h"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

class Hooks final : public CudaHooks {
 public:
  Backend& backend() const override { return cuda::backend(); }
  int device_count() const override { return driver_device_count(); }
  std::string unavailable_reason() const override { return driver_unavailable_reason(); }
  MemoryStats memory_stats(Device device) const override { return allocator_memory_stats(device); }
  void reset_peak_memory_stats(Device device) const override { reset_allocator_peaks(device); }
  void synchronize(Device device) const override { synchronize_device(device); }
  void synchronize_current_stream(Device device) const override { current_stream(device).synchronize(); }
  std::optional<GpuStatus> gpu_status(int device) const override { return nvml_gpu_status(device); }
  Allocator* pinned_host_allocator() const override { return pinned_host_allocator_if_available(); }
};

// Registers at load: before main when a program links this library, inside
// dlopen when libkiln loads it.
[[maybe_unused]] const bool registered = [] {
  static const Hooks hooks;
  register_cuda_hooks(&hooks);
  return true;
}();

}  // namespace

}  // namespace kiln::cuda
