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
// Blocks are allocated with cudaHostAllocPortable, so they count as pinned
// for every device's context, not only the one current in the calling thread
// (a DataLoader worker has never chosen a device).
#include "tensor/cuda/pinned_allocator.h"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

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
    allocated_bytes_.fetch_add(nbytes, std::memory_order_relaxed);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    allocated_bytes_.fetch_sub(nbytes, std::memory_order_relaxed);
    const size_t size = cached_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_bytes_ + size <= kMaxCachedBytes) {
        cache_.emplace(size, ptr);
        cached_bytes_ += size;
        return;
      }
    }
    // Called from Storage's destructor, so it must not throw; cudaFreeHost
    // fails only while the runtime unloads at exit (the driver then frees
    // everything) or after a sticky fault that its op already reported.
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
  }

  void empty_cache() {
    std::unordered_multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(cache_);
      cached_bytes_ = 0;
    }
    for (auto& [size, ptr] : blocks) KILN_CUDA_CHECK(cudaFreeHost(ptr));
  }

  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }

  size_t allocated_bytes() const { return allocated_bytes_.load(std::memory_order_relaxed); }

 private:
  void* take_cached(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(size);
    if (it == cache_.end()) return nullptr;
    void* ptr = it->second;
    cache_.erase(it);
    cached_bytes_ -= size;
    return ptr;
  }

  void* host_alloc(size_t size, size_t requested) {
    void* ptr = nullptr;
    cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: retry after giving the cache back
      empty_cache();
      status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
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

void pinned_empty_cache() { the_pinned_allocator().empty_cache(); }

size_t pinned_cached_bytes() { return the_pinned_allocator().cached_bytes(); }

size_t pinned_allocated_bytes() { return the_pinned_allocator().allocated_bytes(); }

}  // namespace kiln::cuda
