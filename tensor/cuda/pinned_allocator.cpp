// Note [CUDA pinned allocator]
// cudaHostAlloc page-locks and maps every page of the block into the GPU's
// address space, and cudaFreeHost unmaps it again; both take milliseconds
// for a batch-sized block and cudaFreeHost synchronizes the device. A
// DataLoader with pin_memory pins every batch, the same few sizes over and
// over, so freed blocks are kept in a cache keyed by their rounded size and
// handed to the next request of that size, as the CPU allocator does (Note
// [CPU allocator] in tensor/allocator.cpp), up to kMaxCachedBytes in all:
// page-locked memory is taken from what the OS can swap, and a cache that
// grew without bound would starve the rest of the machine. Unlike there,
// small blocks are cached too, since cudaHostAlloc costs as much for them.
// When the driver runs out of page-lockable memory, the cache is returned to
// it and the allocation retried once.
//
// Host-to-device copies from pinned memory are asynchronous (Note [CUDA
// copies] in copy.cu): the copy may still be reading a block when its tensor
// is freed. The copy says so with record_pinned_use, and the free then
// records a CUDA event on each stream that used the block; the block waits
// in `pending_` until every event has completed and only then joins the
// cache, as in PyTorch's CachingHostAllocator. Pending blocks are looked at
// on every allocation, so they return to use as soon as their copies end.
// While a CUDA graph capture runs (capture_underway() in allocator.h) no
// event is recorded, queried or waited for and nothing is freed, as in the
// device allocator: a block freed then waits in `deferred_`, with its uses
// if any, until the capture has ended. cudaHostAlloc runs in relaxed
// capture mode, so that a DataLoader thread pinning a batch does not break a
// capture on another thread.
//
// Blocks are allocated with cudaHostAllocPortable, so they count as pinned
// for every device's context, not only the one current in the calling thread
// (a DataLoader worker has never chosen a device).
#include "tensor/cuda/pinned_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/cuda/allocator.h"
#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"

namespace kiln::cuda {

namespace {

// Sizes are rounded up to whole 4 KiB pages below 1 MiB and to 64 KiB above,
// so that batches of nearly equal size share blocks, wasting at most ~6%.
constexpr size_t kPage = size_t{4} << 10;
constexpr size_t kLargeGranularity = size_t{64} << 10;
constexpr size_t kMaxCachedBytes = size_t{1} << 30;

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }
size_t cached_size(size_t n) { return round_up(n, n < (size_t{1} << 20) ? kPage : kLargeGranularity); }

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    KILN_CHECK(device.is_cpu(), "CUDA pinned allocator: page-locked memory is host memory, asked for ", device);
    if (nbytes == 0) return nullptr;
    const size_t size = cached_size(nbytes);
    void* ptr = take_cached(size);
    if (ptr == nullptr) ptr = host_alloc(size, nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      uses_.emplace(ptr, std::vector<Use>{});
    }
    allocated_bytes_.fetch_add(nbytes, std::memory_order_relaxed);
    return ptr;
  }

  bool record_use(const void* ptr, cudaStream_t stream, Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = uses_.find(const_cast<void*>(ptr));
    if (it == uses_.end()) return false;
    const Use use{stream, device.index};
    if (std::find(it->second.begin(), it->second.end(), use) == it->second.end()) it->second.push_back(use);
    return true;
  }

  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    allocated_bytes_.fetch_sub(nbytes, std::memory_order_relaxed);
    const size_t size = cached_size(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Use> uses;
    if (auto it = uses_.find(ptr); it != uses_.end()) {
      uses = std::move(it->second);
      uses_.erase(it);
    }
    // Even a block no stream used waits: caching it may mean freeing it
    // (a full cache), and cudaFreeHost would break the capture.
    if (capture_underway()) {
      deferred_.push_back({ptr, size, std::move(uses)});
      return;
    }
    release_after_uses(ptr, size, uses);
  }

  void empty_cache() {
    std::unordered_multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      KILN_CHECK(!capture_underway(), "CUDA pinned allocator: empty_cache while a CUDA graph capture is underway: "
                 "memory cannot be given back during a capture");
      process_pending(/*wait=*/true);
      blocks.swap(cache_);
      cached_bytes_ = 0;
    }
    // Every block is given back even if one fails; the first failure is reported.
    cudaError_t first = cudaSuccess;
    for (auto& [size, ptr] : blocks) {
      const cudaError_t status = cudaFreeHost(ptr);
      if (status != cudaSuccess && first == cudaSuccess) first = status;
    }
    KILN_CUDA_CHECK(first);
  }

  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }

  size_t allocated_bytes() const { return allocated_bytes_.load(std::memory_order_relaxed); }

 private:
  // A stream that used a block, and its device (events belong to one).
  struct Use {
    cudaStream_t stream;
    int device;
    bool operator==(const Use&) const = default;
  };
  // A freed block waiting for the events recorded on the streams that used it.
  struct PendingBlock {
    void* ptr;
    size_t size;
    std::vector<cudaEvent_t> events;
  };
  // A block freed during a capture, before any event could be recorded.
  struct DeferredBlock {
    void* ptr;
    size_t size;
    std::vector<Use> uses;
  };

  // An event after the work queued so far on the use's stream, or nullptr
  // when none can be made, after waiting for the device instead. Never
  // throws: it runs in Storage's destructor.
  static cudaEvent_t record_event(const Use& use) {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    const bool switched = previous != use.device && cudaSetDevice(use.device) == cudaSuccess;
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(event, use.stream) != cudaSuccess) {
      (void)cudaGetLastError();
      if (event != nullptr) (void)cudaEventDestroy(event);
      event = nullptr;
      if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    }
    if (switched && previous >= 0 && cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
    return event;
  }

  // With mutex_ held: keeps a block whose users are done, or gives it back.
  void cache_or_free(void* ptr, size_t size) {
    if (cached_bytes_ + size <= kMaxCachedBytes) {
      cache_.emplace(size, ptr);
      cached_bytes_ += size;
      return;
    }
    // Must not throw (Storage's destructor); cudaFreeHost fails only while
    // the runtime unloads at exit (the driver then frees everything) or
    // after a sticky fault that its op already reported.
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
  }

  // With mutex_ held: records an event on each stream that used the block
  // and keeps it pending until they complete, or caches it at once.
  void release_after_uses(void* ptr, size_t size, const std::vector<Use>& uses) {
    std::vector<cudaEvent_t> events;
    for (const Use& use : uses) {
      if (cudaEvent_t event = record_event(use)) events.push_back(event);
    }
    if (events.empty()) {
      cache_or_free(ptr, size);
    } else {
      pending_.push_back({ptr, size, std::move(events)});
    }
  }

  // With mutex_ held: moves pending blocks whose events have completed (all
  // of them, waiting, when `wait`) into the cache; nothing while a capture
  // runs, and then first records the deferred blocks' events.
  void process_pending(bool wait) {
    if (capture_underway()) return;
    for (const DeferredBlock& block : deferred_) release_after_uses(block.ptr, block.size, block.uses);
    deferred_.clear();
    auto done = [&](PendingBlock& block) {
      for (cudaEvent_t event : block.events) {
        const cudaError_t status = wait ? cudaEventSynchronize(event) : cudaEventQuery(event);
        if (status == cudaErrorNotReady || detail::refused_by_capture(status)) {
          (void)cudaGetLastError();
          return false;  // not yet, or a capture began meanwhile on another thread
        }
        // Any other failure is a fault after which the copy will not run.
        if (status != cudaSuccess) (void)cudaGetLastError();
      }
      for (cudaEvent_t event : block.events) {
        if (cudaEventDestroy(event) != cudaSuccess) (void)cudaGetLastError();
      }
      cache_or_free(block.ptr, block.size);
      return true;
    };
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), done), pending_.end());
  }

  void* take_cached(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    process_pending(/*wait=*/false);
    auto it = cache_.find(size);
    if (it == cache_.end()) return nullptr;
    void* ptr = it->second;
    cache_.erase(it);
    cached_bytes_ -= size;
    return ptr;
  }

  // cudaHostAlloc in relaxed capture mode: pinning is no step of a graph.
  static cudaError_t pin(void** ptr, size_t size) {
    RelaxedCaptureMode relaxed;
    return cudaHostAlloc(ptr, size, cudaHostAllocPortable);
  }

  void* host_alloc(size_t size, size_t requested) {
    void* ptr = nullptr;
    cudaError_t status = pin(&ptr, size);
    if (status == cudaErrorMemoryAllocation && capture_underway()) {
      (void)cudaGetLastError();
      KILN_FAIL("CUDA pinned allocator: out of page-lockable host memory: tried to allocate ", requested,
                " bytes during a CUDA graph capture, which cannot return the cache");
    }
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: retry after giving the cache back
      empty_cache();
      status = pin(&ptr, size);
      if (status == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        KILN_FAIL("CUDA pinned allocator: out of page-lockable host memory: tried to allocate ", requested,
                  " bytes after returning the cache to the driver");
      }
    }
    KILN_CUDA_CHECK(status);
    return ptr;
  }

  std::atomic<size_t> allocated_bytes_{0};
  std::mutex mutex_;
  std::unordered_multimap<size_t, void*> cache_;  // rounded size -> free block
  size_t cached_bytes_ = 0;
  std::unordered_map<void*, std::vector<Use>> uses_;  // blocks in use -> streams that used them
  std::vector<PendingBlock> pending_;
  std::vector<DeferredBlock> deferred_;
};

PinnedHostAllocator& the_pinned_allocator() {
  // Never destroyed, as the CPU allocator: pinned tensors held in static
  // objects may be freed after any static allocator would have been.
  static PinnedHostAllocator* allocator = new PinnedHostAllocator;
  return *allocator;
}

}  // namespace

Allocator& pinned_host_allocator() { return the_pinned_allocator(); }

Allocator* pinned_host_allocator_if_available() { return cuda_available() ? &the_pinned_allocator() : nullptr; }

bool record_pinned_use(const void* ptr, cudaStream_t stream, Device device) {
  return the_pinned_allocator().record_use(ptr, stream, device);
}

void pinned_empty_cache() { the_pinned_allocator().empty_cache(); }

size_t pinned_cached_bytes() { return the_pinned_allocator().cached_bytes(); }

size_t pinned_allocated_bytes() { return the_pinned_allocator().allocated_bytes(); }

}  // namespace kiln::cuda
