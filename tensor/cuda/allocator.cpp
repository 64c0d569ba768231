// Note [CUDA allocator]
// Each CUDA device gets one CachingAllocator (Note [Caching allocator] in
// tensor/caching_allocator.h) over cudaMalloc and cudaFree: freed memory is
// kept and handed out again, so that a training step's hundreds of
// temporaries cost no cudaMalloc (tens of microseconds) and no cudaFree
// (which synchronizes the device). Blocks belong to the stream that was
// current when they were allocated (Note [Current stream] in stream.h); a
// block used on another stream is announced with record_stream, and the
// allocator records a CUDA event there when it is freed.
//
// The per-device allocators are created on first use and never destroyed:
// Storages held in static objects are freed after any static allocator
// would have been, and by then the CUDA runtime may be unloading, so every
// call on the free path ignores failures (the driver frees everything at
// exit anyway).
//
// It registers itself for DeviceType::CUDA when libkiln is loaded, not only
// when the backend is first asked for: Tensor::empty on a CUDA device reaches
// the allocator before any kernel, and must say "no GPU" rather than "Kiln was
// built without CUDA".
#include "tensor/cuda/allocator.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>

#include "tensor/caching_allocator.h"
#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

namespace kiln::cuda {

namespace {

constexpr int kMaxDevices = 64;
constexpr double kMiB = 1024.0 * 1024.0;

// Makes a device current without throwing, for the free path; restores the
// previous one when destroyed.
class QuietDeviceSwitch {
 public:
  explicit QuietDeviceSwitch(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess || previous_ == device || cudaSetDevice(device) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
  }
  ~QuietDeviceSwitch() {
    if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  QuietDeviceSwitch(const QuietDeviceSwitch&) = delete;
  QuietDeviceSwitch& operator=(const QuietDeviceSwitch&) = delete;

 private:
  int previous_ = -1;
};

// cudaMalloc, cudaFree and events of one device for its CachingAllocator.
class CudaMemorySource final : public DeviceMemorySource {
 public:
  explicit CudaMemorySource(int device) : device_(device) {}

  void* malloc(size_t nbytes) override {
    QuietDeviceSwitch on(device_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: the allocator retries after emptying its cache
      return nullptr;
    }
    KILN_CUDA_CHECK(status);
    return ptr;
  }

  void free(void* ptr) override {
    QuietDeviceSwitch on(device_);
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
  }

  void* record_event(StreamHandle stream) override {
    QuietDeviceSwitch on(device_);
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventRecord(event, static_cast<cudaStream_t>(stream)) == cudaSuccess) {
      return event;
    }
    // Without an event (the runtime unloading, a sticky fault) the only safe
    // answer is to wait for the device here.
    (void)cudaGetLastError();
    if (event != nullptr) (void)cudaEventDestroy(event);
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    return nullptr;
  }

  bool event_done(void* event) override {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaSuccess) return true;
    (void)cudaGetLastError();
    // Any other failure is a fault after which no queued work will run.
    return status != cudaErrorNotReady;
  }

  void wait_event(void* event) override {
    if (cudaEventSynchronize(static_cast<cudaEvent_t>(event)) != cudaSuccess) (void)cudaGetLastError();
  }

  void destroy_event(void* event) override {
    if (cudaEventDestroy(static_cast<cudaEvent_t>(event)) != cudaSuccess) (void)cudaGetLastError();
  }

  std::string device_memory_report() override {
    QuietDeviceSwitch on(device_);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return "";
    }
    return kiln::detail::str("; cuda:", device_, " has ", free_bytes / kMiB, " MiB free of ", total_bytes / kMiB,
                             " MiB");
  }

 private:
  int device_;
};

struct DeviceCache {
  CudaMemorySource source;
  CachingAllocator cache;
  explicit DeviceCache(int device) : source(device), cache("CUDA allocator", cuda_device(device).str(), &source) {}
};

std::array<std::atomic<DeviceCache*>, kMaxDevices>& device_caches() {
  static std::array<std::atomic<DeviceCache*>, kMaxDevices> caches{};
  return caches;
}

// `device`'s allocator, made on first use; the caller checked the device.
CachingAllocator& cache_for(int device) {
  KILN_CHECK(device < kMaxDevices, "CUDA allocator: device ordinal ", device, " is past the ", kMaxDevices,
             " devices supported");
  std::atomic<DeviceCache*>& slot = device_caches()[static_cast<size_t>(device)];
  DeviceCache* cache = slot.load(std::memory_order_acquire);
  if (cache == nullptr) {
    static std::mutex creating;
    std::lock_guard<std::mutex> lock(creating);
    cache = slot.load(std::memory_order_acquire);
    if (cache == nullptr) {
      cache = new DeviceCache(device);  // never destroyed (Note [CUDA allocator])
      slot.store(cache, std::memory_order_release);
    }
  }
  return cache->cache;
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    KILN_CHECK(device.is_cuda(), "CUDA allocator: asked for memory on ", device);
    DeviceGuard guard(device, "CUDA allocator");
    if (nbytes == 0) return nullptr;
    return cache_for(device.index).allocate(nbytes, current_raw_stream(device));
  }

  // Called from Storage's destructor: never throws (the cache's free path
  // does not).
  void deallocate(void* ptr, size_t, Device device) override {
    if (ptr == nullptr) return;
    cache_for(device.index).deallocate(ptr);
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

MemoryStats memory_stats(Device device) {
  check_device(device, "memory_stats");
  const CachingAllocatorStats s = cache_for(device.index).stats();
  MemoryStats out;
  out.allocated_bytes = s.allocated_bytes;
  out.requested_bytes = s.requested_bytes;
  out.reserved_bytes = s.reserved_bytes;
  out.peak_allocated_bytes = s.peak_allocated_bytes;
  out.peak_reserved_bytes = s.peak_reserved_bytes;
  out.active_blocks = s.active_blocks;
  out.segments = s.segments;
  out.pending_event_blocks = s.pending_event_blocks;
  out.cuda_malloc_calls = s.malloc_calls;
  out.cuda_free_calls = s.free_calls;
  out.alloc_retries = s.alloc_retries;
  out.ooms = s.ooms;
  return out;
}

void reset_peak_memory_stats(Device device) {
  check_device(device, "reset_peak_memory_stats");
  cache_for(device.index).reset_peak_stats();
}

void empty_cache() {
  for (std::atomic<DeviceCache*>& slot : device_caches()) {
    if (DeviceCache* cache = slot.load(std::memory_order_acquire)) cache->cache.empty_cache();
  }
}

void record_stream(const Storage& storage, const Stream& stream) {
  KILN_CHECK(storage.device() == stream.device(), "record_stream: the storage is on ", storage.device(),
             " but the stream belongs to ", stream.device());
  if (storage.data() == nullptr) return;  // zero bytes: no memory to protect
  cache_for(storage.device().index).record_stream(storage.data(), stream.handle());
}

void record_stream(const Tensor& tensor, const Stream& stream) { record_stream(*tensor.storage(), stream); }

}  // namespace kiln::cuda
