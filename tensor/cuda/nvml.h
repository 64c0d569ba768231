// GPU utilisation and memory from NVML, the driver's monitoring library, for
// progress lines and logs.
//
// NVML ships with the NVIDIA driver, not with the CUDA toolkit, so it is
// loaded at run time (dlopen "libnvidia-ml.so.1") rather than linked: Kiln
// built with CUDA still starts on a machine without a driver, and there
// every query answers "no status" instead of failing.
//   if (auto s = cuda::gpu_status(0)) std::cout << s->utilization_percent << "%\n";
//
// This header does not include the CUDA runtime or NVML's headers.
#pragma once

#include <cstdint>
#include <optional>

namespace kiln::cuda {

// One device as NVML sees it now.
struct GpuStatus {
  // Percent of the last sample period (1/6 s to 1 s, by GPU) during which a
  // kernel was running, and during which device memory was read or written.
  int utilization_percent = 0;
  int memory_utilization_percent = 0;
  // Device memory in use by every process (not only Kiln's tensors), and all of it.
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
};

// True when NVML was loaded and initialised: the driver is installed.
bool nvml_available();

// The status of CUDA device `device` (a CUDA ordinal, which NVML numbers
// differently: the device is found by its PCI bus id). std::nullopt, never an
// error, when NVML or the driver is absent, the ordinal names no device, or
// NVML cannot answer for it (some virtualised GPUs). Thread-safe.
std::optional<GpuStatus> gpu_status(int device);

}  // namespace kiln::cuda
