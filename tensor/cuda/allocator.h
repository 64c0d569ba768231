// The CUDA device allocator behind every Storage on a CUDA device, and its
// statistics (Note [CUDA allocator] in allocator.cpp; the statistics' type
// is in tensor/cuda_status.h).
//
//   cuda::MemoryStats s = cuda::memory_stats(cuda_device(0));
//   std::cout << s.allocated_bytes << " of " << s.reserved_bytes << " bytes in use\n";
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/allocator.h"
#include "tensor/cuda_status.h"
#include "tensor/cuda/stream.h"

namespace kiln {
class Storage;
class Tensor;
}  // namespace kiln

namespace kiln::cuda {

// The allocator for DeviceType::CUDA: one caching allocator per device.
// Never null; the same object for every device ordinal.
Allocator& cuda_allocator();

// Installs cuda_allocator() for DeviceType::CUDA (set_allocator). Idempotent;
// runs when libkiln_cuda is loaded and again when the CUDA backend is first used.
void register_cuda_allocator();

// MemoryStats, memory_stats(device) and reset_peak_memory_stats(device) are
// in tensor/cuda_status.h, which every build has; these answer them when
// libkiln_cuda is loaded. Throw kiln::Error when `device` is not usable.
MemoryStats allocator_memory_stats(Device device);
void reset_allocator_peaks(Device device);

// Gives every cached, unused segment of every device back to the driver
// (cudaFree), waiting first for blocks that other streams may still use.
// Tensor memory in use is untouched.
void empty_cache();

// Says that `storage` (CUDA memory) is used by work queued on `stream`,
// which is not the stream it was allocated on: when the storage is freed,
// its memory is not reused until that work has finished. As PyTorch's
// Tensor.record_stream:
//   { cuda::StreamGuard g(side); y = x * 2; }  // x made on the default stream
//   cuda::record_stream(x, side);                // before x may be freed
void record_stream(const Storage& storage, const Stream& stream);
void record_stream(const Tensor& tensor, const Stream& stream);

// ---- private pools for CUDA graphs (Note [CUDA graphs] in graph.h) ----------

// Memory that only one CUDA graph's allocations use: a caching allocator of
// its own. Blocks allocated from it go back to it when freed, never to the
// device's shared cache, so memory that a graph's replays write is never
// handed to another tensor while the pool lives. It lives while a
// GraphMemoryPoolScope, a Graph or any block allocated from it holds it, and
// gives its memory back to the driver when the last of them is gone.
class GraphMemoryPool;
std::shared_ptr<GraphMemoryPool> make_graph_memory_pool(Device device);

// While it lives, the calling thread's allocations on `stream`'s device
// made while `stream` is that device's current stream come from `pool`.
// The pool takes cudaMalloc calls out of the capture's checks (capture mode
// relaxed for the call): the memory outlives the capture, so replays may use
// it. One scope per thread at a time.
class GraphMemoryPoolScope {
 public:
  GraphMemoryPoolScope(std::shared_ptr<GraphMemoryPool> pool, const Stream& stream);
  ~GraphMemoryPoolScope();
  GraphMemoryPoolScope(const GraphMemoryPoolScope&) = delete;
  GraphMemoryPoolScope& operator=(const GraphMemoryPoolScope&) = delete;
};

// What `pool` holds, in memory_stats' terms.
MemoryStats graph_memory_pool_stats(const GraphMemoryPool& pool);

// Counts a CUDA graph capture as running, on any thread and device, while
// it lives (a Graph holds one from capture_begin to capture_end). While any
// capture runs, CUDA refuses event queries, waits and frees, and a call
// from another thread would break the capture: the allocators (this one and
// the pinned host allocator) put that work off until no capture runs (Note
// [Caching allocator] in tensor/caching_allocator.h).
class CaptureUnderway {
 public:
  CaptureUnderway();
  ~CaptureUnderway();
  CaptureUnderway(const CaptureUnderway&) = delete;
  CaptureUnderway& operator=(const CaptureUnderway&) = delete;
};
bool capture_underway();

// Lets the calling thread, for a scope, make calls that a stream capture
// would otherwise refuse and be broken by (cudaMalloc, cudaHostAlloc): for
// memory that is no step of a graph (a graph pool's segments, a pinned
// batch, a stream's error buffer).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool active_ = true;  // false when the mode could not be switched
};

}  // namespace kiln::cuda
