// tensor/cuda_status.h, through the hooks libkiln_cuda registers when it is
// loaded (Note [Backends as plugins] in plugin.h).
#include "tensor/cuda_status.h"

#include <atomic>

#include "tensor/cuda_hooks.h"
#include "tensor/error.h"
#include "tensor/plugin.h"

namespace kiln::cuda {

namespace {

std::atomic<const CudaHooks*>& hooks_slot() {
  static std::atomic<const CudaHooks*> slot{nullptr};
  return slot;
}

// The hooks, or a kiln::Error naming `op` and why there are none.
const CudaHooks& require_hooks(const char* op, Device device) {
  const CudaHooks* hooks = cuda_hooks();
  KILN_CHECK(hooks != nullptr, op, ": cannot use ", device, ": ", cuda_library_error());
  return *hooks;
}

}  // namespace

void register_cuda_hooks(const CudaHooks* hooks) { hooks_slot().store(hooks, std::memory_order_release); }

const CudaHooks* cuda_hooks() {
  // Every op on a CUDA tensor asks (backend_for), so the registered hooks are
  // one atomic load away; only the first call, or one without the library,
  // goes to the loader.
  const CudaHooks* hooks = hooks_slot().load(std::memory_order_acquire);
  if (hooks != nullptr) return hooks;
  load_plugin("cuda");
  return hooks_slot().load(std::memory_order_acquire);
}

std::string cuda_library_error() {
  const PluginLoad& load = load_plugin("cuda");
  if (!load.loaded) return load.error;
  if (hooks_slot().load() == nullptr) return plugin_path("cuda") + " was loaded but registered no CUDA hooks";
  return "";
}

int device_count() {
  const CudaHooks* hooks = cuda_hooks();
  return hooks ? hooks->device_count() : 0;
}

bool is_available() { return device_count() > 0; }

std::string unavailable_reason() {
  const CudaHooks* hooks = cuda_hooks();
  return hooks ? hooks->unavailable_reason() : cuda_library_error();
}

MemoryStats memory_stats(Device device) { return require_hooks("memory_stats", device).memory_stats(device); }

void reset_peak_memory_stats(Device device) {
  require_hooks("reset_peak_memory_stats", device).reset_peak_memory_stats(device);
}

void synchronize(Device device) { require_hooks("cuda::synchronize", device).synchronize(device); }

std::optional<GpuStatus> gpu_status(int device) {
  const CudaHooks* hooks = cuda_hooks();
  if (hooks == nullptr) return std::nullopt;
  return hooks->gpu_status(device);
}

}  // namespace kiln::cuda
