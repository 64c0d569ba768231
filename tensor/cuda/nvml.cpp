// NVML through dlopen (tensor/cuda/nvml.h).
//
// Only the handful of NVML entry points used here are declared, with the
// types of nvml.h (an int status, opaque device handles, two plain structs);
// NVML keeps these signatures stable across driver versions, which is what
// the _v2 suffixes are for.
#include "tensor/cuda/nvml.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <array>
#include <mutex>

#include "tensor/cuda/device.h"

namespace kiln::cuda {

namespace {

using nvmlReturn_t = int;  // NVML_SUCCESS is 0
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// The loaded library, or `loaded` false. Loaded once, never unloaded: the
// process may ask until it exits, and NVML frees its state then.
struct Nvml {
  bool loaded = false;
  nvmlReturn_t (*device_by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization_rates)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
};

template <class F>
bool find_symbol(void* library, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(library, name));
  return fn != nullptr;
}

const Nvml& nvml() {
  static const Nvml result = [] {
    Nvml n;
    void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return n;  // no driver installed
    nvmlReturn_t (*init)() = nullptr;
    const bool found = find_symbol(library, "nvmlInit_v2", init) &&
                       find_symbol(library, "nvmlDeviceGetHandleByPciBusId_v2", n.device_by_pci_bus_id) &&
                       find_symbol(library, "nvmlDeviceGetUtilizationRates", n.utilization_rates) &&
                       find_symbol(library, "nvmlDeviceGetMemoryInfo", n.memory_info);
    // A library without a working driver behind it fails nvmlInit.
    n.loaded = found && init() == kNvmlSuccess;
    if (!n.loaded) dlclose(library);
    return n;
  }();
  return result;
}

// CUDA ordinal -> NVML handle, looked up once per device.
constexpr int kMaxDevices = 64;
std::mutex handles_mutex;
std::array<nvmlDevice_t, kMaxDevices> handles{};

nvmlDevice_t handle_for(int device) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  nvmlDevice_t& handle = handles[static_cast<size_t>(device)];
  if (handle != nullptr) return handle;
  // CUDA orders devices fastest first (or as CUDA_VISIBLE_DEVICES says), NVML
  // by PCI bus: the bus id is the name both agree on.
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (nvml().device_by_pci_bus_id(bus_id, &handle) != kNvmlSuccess) handle = nullptr;
  return handle;
}

}  // namespace

bool nvml_available() { return nvml().loaded; }

std::optional<GpuStatus> nvml_gpu_status(int device) {
  // NVML first: without a driver it is absent, and the CUDA runtime is not
  // asked anything.
  if (!nvml_available() || device < 0 || device >= kMaxDevices || device >= driver_device_count()) return std::nullopt;
  nvmlDevice_t handle = handle_for(device);
  if (handle == nullptr) return std::nullopt;
  nvmlUtilization_t utilization{};
  nvmlMemory_t memory{};
  if (nvml().utilization_rates(handle, &utilization) != kNvmlSuccess ||
      nvml().memory_info(handle, &memory) != kNvmlSuccess) {
    return std::nullopt;
  }
  GpuStatus status;
  status.utilization_percent = static_cast<int>(utilization.gpu);
  status.memory_utilization_percent = static_cast<int>(utilization.memory);
  status.memory_used_bytes = memory.used;
  status.memory_total_bytes = memory.total;
  return status;
}

}  // namespace kiln::cuda
