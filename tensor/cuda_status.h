// CUDA as every build of Kiln can ask about it, with or without the CUDA
// backend's library (Note [Backends as plugins] in plugin.h):
//
//   if (kiln::cuda::is_available()) model->to(kiln::kCUDA);
//   else std::cerr << "training on the CPU: " << kiln::cuda::unavailable_reason() << "\n";
//
// These are defined in libkiln, which loads libkiln_cuda the first time one
// is called. The rest of the CUDA API (streams, graphs, settings:
// tensor/cuda/*.h) is libkiln_cuda's, for programs that link kiln::kiln_cuda.
// Nothing here needs a CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "tensor/device.h"

namespace kiln::cuda {

// Number of usable CUDA devices; 0 (never an error) when Kiln was built
// without CUDA, when libkiln_cuda or a CUDA library it needs cannot be
// loaded, without a GPU or driver, or with a driver too old for this build's
// runtime.
int device_count();

// True when at least one CUDA device can run Kiln's kernels.
bool is_available();

// Why is_available() is false ("... libkiln_cuda.so.0 does not exist: this
// Kiln was built without its cuda backend", "cannot load ...: libcudart.so.13:
// cannot open shared object file", "cudaErrorNoDevice: no CUDA-capable device
// is detected"); empty when it is true.
std::string unavailable_reason();

// What the caching allocator of one device holds (Note [CUDA allocator]).
// Block sizes are rounded up to 512 bytes; "reserved" is what came from
// cudaMalloc, in use or cached.
struct MemoryStats {
  size_t allocated_bytes = 0;       // tensor memory in use now (rounded)
  size_t requested_bytes = 0;       // the same, as requested
  size_t reserved_bytes = 0;        // held from cudaMalloc: in use plus cached
  size_t peak_allocated_bytes = 0;  // since the start or reset_peak_memory_stats
  size_t peak_reserved_bytes = 0;
  int64_t active_blocks = 0;         // allocations not yet freed
  int64_t segments = 0;              // cudaMalloc blocks held
  int64_t pending_event_blocks = 0;  // freed, waiting for other streams (record_stream)
  int64_t cuda_malloc_calls = 0;     // failed ones included
  int64_t cuda_free_calls = 0;
  int64_t alloc_retries = 0;  // allocations that emptied the cache and tried again
  int64_t ooms = 0;           // allocations that failed even then
};

// Statistics of `device`'s allocator (all zero before its first allocation).
// Throws kiln::Error when `device` is not a usable CUDA device.
//   cuda::MemoryStats s = cuda::memory_stats(cuda_device(0));
MemoryStats memory_stats(Device device);
// Sets the peaks of `device` to the current values.
void reset_peak_memory_stats(Device device);

// Blocks the host until all work on `device`, on every stream, has finished,
// then throws the first error a kernel recorded since the last wait (Note
// [CUDA kernel errors] in tensor/cuda/kernel_errors.h).
void synchronize(Device device);

// One device as NVML, the driver's monitoring library, sees it now.
struct GpuStatus {
  // Percent of the last sample period (1/6 s to 1 s, by GPU) during which a
  // kernel was running, and during which device memory was read or written.
  int utilization_percent = 0;
  int memory_utilization_percent = 0;
  // Device memory in use by every process (not only Kiln's tensors), and all of it.
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
};

// `device`'s status, or nullopt when there is no such device, no CUDA or no
// NVML (it ships with the driver, and is loaded at run time).
//   if (auto s = cuda::gpu_status(0)) std::cout << s->utilization_percent << "%\n";
std::optional<GpuStatus> gpu_status(int device);

}  // namespace kiln::cuda
