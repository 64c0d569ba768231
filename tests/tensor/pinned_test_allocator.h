// A stand-in for the CUDA pinned allocator in tests (Note [Pinned memory] in
// tensor/allocator.h): ordinary host memory that counts what it hands out, so
// that pin_memory and the DataLoader's pin_memory option can be checked on
// machines without a GPU.
#pragma once

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "tensor/allocator.h"
#include "tensor/error.h"

namespace kiln {

class CountingHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    KILN_CHECK(device.is_cpu(), "CountingHostAllocator: asked for memory on ", device);
    if (nbytes == 0) return nullptr;
    void* ptr = nullptr;
    KILN_CHECK(posix_memalign(&ptr, kCpuAlignment, nbytes) == 0, "CountingHostAllocator: out of memory");
    ++allocations;
    live_bytes += nbytes;
    std::lock_guard<std::mutex> lock(mutex);
    threads.insert(std::this_thread::get_id());
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    ++deallocations;
    live_bytes -= nbytes;
    std::free(ptr);
  }

  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> deallocations{0};
  std::atomic<int64_t> live_bytes{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;  // that called allocate
};

// Installs `allocator` as the pinned allocator (nullptr: none) for its
// lifetime and puts back whatever was there before.
class PinnedAllocatorScope {
 public:
  explicit PinnedAllocatorScope(Allocator* allocator) : previous_(set_pinned_allocator(allocator)) {}
  ~PinnedAllocatorScope() { set_pinned_allocator(previous_); }
  PinnedAllocatorScope(const PinnedAllocatorScope&) = delete;
  PinnedAllocatorScope& operator=(const PinnedAllocatorScope&) = delete;

 private:
  Allocator* previous_;
};

}  // namespace kiln
