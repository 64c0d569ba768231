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
// A CUDA graph's allocations come from a private pool instead, a
// CachingAllocator of its own (Note [CUDA graphs] in graph.h): the shared
// cache could otherwise hand memory that the graph's replays write to
// another tensor. Blocks of private pools are listed in graph_blocks(), so
// that deallocate and record_stream find their pool; with no graph alive
// the list is empty and costs one atomic load per free.
//
// It registers itself for DeviceType::CUDA when libkiln is loaded, not only
// when the backend is first asked for: Tensor::empty on a CUDA device reaches
// the allocator before any kernel, and must say "no GPU" rather than "Kiln was
// built without CUDA".
#include "tensor/cuda/allocator.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

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

std::atomic<int> captures_running{0};

// cudaMalloc, cudaFree and events of one device for its CachingAllocator.
// A graph pool's source (`for_graph_pool`) allocates during a capture: the
// memory is not a step of the graph but lives as long as the pool, so the
// capture may ignore the call.
class CudaMemorySource final : public DeviceMemorySource {
 public:
  explicit CudaMemorySource(int device, bool for_graph_pool = false)
      : device_(device), for_graph_pool_(for_graph_pool) {}

  void* malloc(size_t nbytes) override {
    QuietDeviceSwitch on(device_);
    std::unique_ptr<RelaxedCaptureMode> relaxed;
    if (for_graph_pool_) relaxed = std::make_unique<RelaxedCaptureMode>();
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
    // Not yet; or refused because a capture began meanwhile on another
    // thread (the work may still run). Any other failure is a fault after
    // which no queued work will run.
    return status != cudaErrorNotReady && !detail::refused_by_capture(status);
  }

  bool capture_underway() override { return cuda::capture_underway(); }

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
  bool for_graph_pool_;
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

}  // namespace

// ---- private pools for CUDA graphs ---------------------------------------------------

class GraphMemoryPool {
 public:
  explicit GraphMemoryPool(int device)
      : device(device), source(device, /*for_graph_pool=*/true),
        cache("CUDA graph memory pool", cuda_device(device).str(), &source) {}
  const int device;
  CudaMemorySource source;
  CachingAllocator cache;
};

namespace {

// The blocks that private pools have handed out, each with its pool.
struct GraphBlocks {
  std::mutex mutex;
  std::unordered_map<void*, std::shared_ptr<GraphMemoryPool>> pool_of;
  std::atomic<int64_t> count{0};
};

GraphBlocks& graph_blocks() {
  static GraphBlocks* blocks = new GraphBlocks;  // never destroyed (Note [CUDA allocator])
  return *blocks;
}

// The pool whose block starts at `ptr`, or null.
std::shared_ptr<GraphMemoryPool> graph_pool_of(void* ptr, bool forget) {
  GraphBlocks& blocks = graph_blocks();
  if (blocks.count.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(blocks.mutex);
  auto it = blocks.pool_of.find(ptr);
  if (it == blocks.pool_of.end()) return nullptr;
  std::shared_ptr<GraphMemoryPool> pool = it->second;
  if (forget) {
    blocks.pool_of.erase(it);
    blocks.count.fetch_sub(1, std::memory_order_release);
  }
  return pool;
}

// The calling thread's GraphMemoryPoolScope, if any.
struct PoolScope {
  std::shared_ptr<GraphMemoryPool> pool;
  cudaStream_t stream = nullptr;
};
thread_local PoolScope t_pool_scope;

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    KILN_CHECK(device.is_cuda(), "CUDA allocator: asked for memory on ", device);
    DeviceGuard guard(device, "CUDA allocator");
    if (nbytes == 0) return nullptr;
    const cudaStream_t stream = current_raw_stream(device);
    const PoolScope& scope = t_pool_scope;
    if (scope.pool && scope.pool->device == device.index && scope.stream == stream) {
      void* ptr = scope.pool->cache.allocate(nbytes, stream);
      GraphBlocks& blocks = graph_blocks();
      std::lock_guard<std::mutex> lock(blocks.mutex);
      blocks.pool_of[ptr] = scope.pool;
      blocks.count.fetch_add(1, std::memory_order_release);
      return ptr;
    }
    return cache_for(device.index).allocate(nbytes, stream);
  }

  // Called from Storage's destructor: never throws (the caches' free paths
  // do not). A graph pool's block goes back to its pool, which is destroyed
  // here if nothing else held it, giving its memory back to the driver.
  void deallocate(void* ptr, size_t, Device device) override {
    if (ptr == nullptr) return;
    if (std::shared_ptr<GraphMemoryPool> pool = graph_pool_of(ptr, /*forget=*/true)) {
      pool->cache.deallocate(ptr);
      return;
    }
    cache_for(device.index).deallocate(ptr);
  }
};

// Installs the allocator as libkiln_cuda is loaded (Note [CUDA allocator]).
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

namespace {

MemoryStats to_memory_stats(const CachingAllocatorStats& s) {
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

}  // namespace

MemoryStats allocator_memory_stats(Device device) {
  check_device(device, "memory_stats");
  return to_memory_stats(cache_for(device.index).stats());
}

void reset_allocator_peaks(Device device) {
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
  if (std::shared_ptr<GraphMemoryPool> pool = graph_pool_of(storage.data(), /*forget=*/false)) {
    pool->cache.record_stream(storage.data(), stream.handle());
    return;
  }
  cache_for(storage.device().index).record_stream(storage.data(), stream.handle());
}

void record_stream(const Tensor& tensor, const Stream& stream) { record_stream(*tensor.storage(), stream); }

std::shared_ptr<GraphMemoryPool> make_graph_memory_pool(Device device) {
  check_device(device, "make_graph_memory_pool");
  return std::make_shared<GraphMemoryPool>(device.index);
}

GraphMemoryPoolScope::GraphMemoryPoolScope(std::shared_ptr<GraphMemoryPool> pool, const Stream& stream) {
  KILN_CHECK(pool != nullptr, "GraphMemoryPoolScope: no pool given");
  KILN_CHECK(t_pool_scope.pool == nullptr,
             "GraphMemoryPoolScope: this thread is already allocating from a graph's pool (one capture per thread "
             "at a time)");
  KILN_CHECK(stream.device() == cuda_device(pool->device), "GraphMemoryPoolScope: the pool belongs to cuda:",
             pool->device, " but the stream to ", stream.device());
  t_pool_scope = {std::move(pool), stream.handle()};
}

GraphMemoryPoolScope::~GraphMemoryPoolScope() { t_pool_scope = {}; }

MemoryStats graph_memory_pool_stats(const GraphMemoryPool& pool) { return to_memory_stats(pool.cache.stats()); }

CaptureUnderway::CaptureUnderway() { captures_running.fetch_add(1); }

CaptureUnderway::~CaptureUnderway() { captures_running.fetch_sub(1); }

bool capture_underway() { return captures_running.load() > 0; }

RelaxedCaptureMode::RelaxedCaptureMode() {
  if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
    (void)cudaGetLastError();
    active_ = false;
  }
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (active_ && cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace kiln::cuda
