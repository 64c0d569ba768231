#include "tensor/allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include <sys/mman.h>

#include "tensor/error.h"
#include "tensor/cuda_hooks.h"

namespace kiln {

namespace {

// Note [CPU allocator]
// glibc serves blocks above its mmap threshold (at most 32 MiB, often far
// less) with a fresh mmap per malloc and unmaps them on free. The kernel
// then zeroes every 4 KiB page on first touch, so a 64 MB activation that a
// training loop allocates each step costs ~16,000 page faults per step,
// more than the op that fills it. CpuAllocator therefore
// - keeps freed large blocks (>= kLargeBlock) in a cache keyed by their
//   rounded size and hands them to the next request of that size, which is
//   what a training loop makes. The cache holds at most as many bytes as
//   the process has ever had in use at once (its high-water mark, and at
//   least kMinCacheCap): a step's activations and gradients are freed at
//   its end and asked for again by the next, so a cap below one step's
//   working set gives memory back and faults it in every step (the baby GPT
//   at 1.3 GB a step under a fixed 1 GiB cap: ~940 faults a step, many of
//   them 2 MiB clears, and 22% slower than with no cap). Bounded so, a
//   program whose block sizes change from step to step keeps at most its
//   peak again in the cache; cpu_empty_cache() returns it. The threshold
//   is low (64 KiB) because blocks of a few hundred KiB suffer too: glibc
//   serves them from the heap, whose top it gives back to the system when
//   they are freed (trimming) and faults in again on the next step, with
//   transparent huge pages a 2 MiB clear each time; LeNet's training step
//   took ~640 page faults before these sizes were cached;
// - aligns large blocks to 2 MiB and asks for transparent huge pages, so a
//   block that is new costs one fault per 2 MiB instead of per 4 KiB.
// Small blocks go straight to aligned_alloc: malloc's arenas already reuse
// them well. cpu_empty_cache() returns the cached blocks to the system.
constexpr size_t kLargeBlock = size_t{64} << 10;
// Cached sizes are rounded up to whole pages below 1 MiB and to 64 KiB
// above, wasting at most ~6% of a block.
constexpr size_t kPage = size_t{4} << 10;
constexpr size_t kLargeGranularity = size_t{64} << 10;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMinCacheCap = size_t{1} << 30;

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }
size_t cached_size(size_t n) { return round_up(n, n < (size_t{1} << 20) ? kPage : kLargeGranularity); }

// KILN_CPU_MEMORY_LIMIT in bytes: digits with an optional K, M or G
// (powers of 1024); unset or empty means no limit.
size_t limit_from_env() {
  const char* text = std::getenv("KILN_CPU_MEMORY_LIMIT");
  if (text == nullptr || *text == '\0') return 0;
  std::string value(text);
  size_t digits = 0;
  while (digits < value.size() && value[digits] >= '0' && value[digits] <= '9') ++digits;
  std::string suffix = value.substr(digits);
  size_t scale = suffix.empty() ? 1
                 : suffix == "K" || suffix == "k" ? size_t{1} << 10
                 : suffix == "M" || suffix == "m" ? size_t{1} << 20
                 : suffix == "G" || suffix == "g" ? size_t{1} << 30
                                                  : 0;
  KILN_CHECK(digits > 0 && digits <= 15 && scale != 0, "KILN_CPU_MEMORY_LIMIT: expected a number of bytes with an "
             "optional K, M or G suffix, got '", value, "'");
  return static_cast<size_t>(std::stoull(value.substr(0, digits))) * scale;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    KILN_CHECK(device.is_cpu(), "CpuAllocator: asked for memory on ", device);
    if (nbytes == 0) return nullptr;
    read_limit_from_env();
    count_allocated(nbytes);
    check_limit(nbytes);
    if (nbytes < kLargeBlock) return checked_aligned_alloc(kCpuAlignment, round_up(nbytes, kCpuAlignment), nbytes);
    size_t size = cached_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = cache_.find(size);
      if (it != cache_.end()) {
        void* ptr = it->second;
        cache_.erase(it);
        cached_bytes_ -= size;
        return ptr;
      }
    }
    if (size < kHugePage) return checked_aligned_alloc(kCpuAlignment, size, nbytes);
    void* ptr = checked_aligned_alloc(kHugePage, size, nbytes);
#ifdef MADV_HUGEPAGE
    madvise(ptr, size, MADV_HUGEPAGE);  // a hint: failure is harmless
#endif
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    allocated_bytes_.fetch_sub(nbytes, std::memory_order_relaxed);
    if (nbytes >= kLargeBlock) {
      size_t size = cached_size(nbytes);
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_bytes_ + size <= std::max(kMinCacheCap, high_water_bytes_.load(std::memory_order_relaxed))) {
        cache_.emplace(size, ptr);
        cached_bytes_ += size;
        return;
      }
    }
    std::free(ptr);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, ptr] : cache_) std::free(ptr);
    cache_.clear();
    cached_bytes_ = 0;
  }

  size_t allocated_bytes() const { return allocated_bytes_.load(std::memory_order_relaxed); }
  void set_limit(size_t bytes) {
    read_limit_from_env();  // so that a later first read does not overwrite it
    std::lock_guard<std::mutex> lock(mutex_);
    limit_error_.clear();
    has_limit_error_.store(false);
    limit_bytes_.store(bytes, std::memory_order_relaxed);
  }
  size_t limit() {
    read_limit_from_env();
    return limit_bytes_.load(std::memory_order_relaxed);
  }
  size_t peak_allocated_bytes() const { return peak_bytes_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_bytes_.store(allocated_bytes(), std::memory_order_relaxed); }

  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }

 private:
  static void* checked_aligned_alloc(size_t alignment, size_t rounded, size_t requested) {
    void* ptr = nullptr;
    // posix_memalign, unlike aligned_alloc, does not require the size to be a
    // multiple of the alignment.
    int status = posix_memalign(&ptr, alignment, rounded);
    KILN_CHECK(status == 0 && ptr != nullptr, "CpuAllocator: out of memory allocating ", requested, " bytes");
    return ptr;
  }

  // Bytes handed out and not yet returned (as requested, not rounded), and
  // their high-water mark: what activation checkpointing saves shows here.
  void count_allocated(size_t nbytes) {
    size_t now = allocated_bytes_.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
    raise_to(peak_bytes_, now);
    raise_to(high_water_bytes_, now);
  }
  static void raise_to(std::atomic<size_t>& mark, size_t now) {
    size_t seen = mark.load(std::memory_order_relaxed);
    while (now > seen && !mark.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }

  // Undoes count_allocated and throws when the request went over the limit.
  // The peak may keep the refused request's bytes: it records what was asked.
  void check_limit(size_t nbytes) {
    size_t limit = limit_bytes_.load(std::memory_order_relaxed);
    if (limit == 0) return;
    size_t now = allocated_bytes_.load(std::memory_order_relaxed);
    if (now <= limit) return;
    allocated_bytes_.fetch_sub(nbytes, std::memory_order_relaxed);
    KILN_CHECK(false, "CpuAllocator: out of memory: allocating ", nbytes, " bytes with ", now - nbytes,
               " in use would exceed this process's limit of ", limit,
               " bytes (KILN_CPU_MEMORY_LIMIT or set_cpu_memory_limit)");
  }

  std::atomic<size_t> allocated_bytes_{0};
  std::atomic<size_t> peak_bytes_{0};
  std::atomic<size_t> high_water_bytes_{0};  // as peak_bytes_, never reset: the cache's cap
  // The environment is read at the first allocation, not when the
  // allocator is made: the CUDA backend registers itself while the library
  // loads, where an error could only end the process. A malformed value
  // fails every allocation (and limit()) until set_cpu_memory_limit.
  void read_limit_from_env() {
    std::call_once(env_read_, [this] {
      try {
        limit_bytes_.store(limit_from_env(), std::memory_order_relaxed);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mutex_);
        limit_error_ = e.message();
        has_limit_error_.store(true);
      }
    });
    if (has_limit_error_.load()) {
      std::string message;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        message = limit_error_;
      }
      KILN_CHECK(message.empty(), message);
    }
  }

  std::atomic<size_t> limit_bytes_{0};
  std::once_flag env_read_;
  std::string limit_error_;  // a malformed KILN_CPU_MEMORY_LIMIT, under mutex_
  std::atomic<bool> has_limit_error_{false};
  std::mutex mutex_;
  std::unordered_multimap<size_t, void*> cache_;  // rounded size -> free block
  size_t cached_bytes_ = 0;
};

CpuAllocator& the_cpu_allocator() {
  // Never destroyed: tensors held in static objects may be freed after any
  // static allocator would have been.
  static CpuAllocator* allocator = new CpuAllocator;
  return *allocator;
}

std::array<Allocator*, kNumDeviceTypes>& allocators() {
  static std::array<Allocator*, kNumDeviceTypes> table{&cpu_allocator(), nullptr};
  return table;
}

// The pinned allocator slot (Note [Pinned memory]). Filled on first use, not
// at load, so that only a process that asks for pinned memory starts the
// CUDA driver to learn whether a device is there.
std::atomic<Allocator*>& pinned_slot() {
  static std::atomic<Allocator*> slot{[]() -> Allocator* {
    const cuda::CudaHooks* hooks = cuda::cuda_hooks();
    return hooks ? hooks->pinned_host_allocator() : nullptr;
  }()};
  return slot;
}

}  // namespace

Allocator& cpu_allocator() { return the_cpu_allocator(); }

void cpu_empty_cache() { the_cpu_allocator().empty_cache(); }

size_t cpu_cached_bytes() { return the_cpu_allocator().cached_bytes(); }

size_t cpu_allocated_bytes() { return the_cpu_allocator().allocated_bytes(); }

size_t cpu_peak_allocated_bytes() { return the_cpu_allocator().peak_allocated_bytes(); }

void cpu_reset_peak_allocated_bytes() { the_cpu_allocator().reset_peak(); }

void set_cpu_memory_limit(size_t bytes) { the_cpu_allocator().set_limit(bytes); }

size_t cpu_memory_limit() { return the_cpu_allocator().limit(); }

Allocator& allocator_for(DeviceType type) {
  Allocator* allocator = allocators()[static_cast<int>(type)];
  if (allocator == nullptr && type == DeviceType::CUDA) {
    // libkiln_cuda installs the CUDA allocator when it is loaded (Note
    // [Backends as plugins]); a tensor made on CUDA may be the first use.
    KILN_CHECK(cuda::cuda_hooks() != nullptr, "allocator_for: no allocator for ", Device(type), ": ",
               cuda::cuda_library_error());
    allocator = allocators()[static_cast<int>(type)];
  }
  KILN_CHECK(allocator != nullptr, "allocator_for: no allocator for ", Device(type));
  return *allocator;
}

void set_allocator(DeviceType type, Allocator* allocator) { allocators()[static_cast<int>(type)] = allocator; }

bool pinned_allocator_available() { return pinned_slot().load() != nullptr; }

Allocator& pinned_allocator(const char* op) {
  Allocator* allocator = pinned_slot().load();
  KILN_CHECK(allocator != nullptr, op, ": no CUDA device is available to page-lock host memory (",
             cuda::unavailable_reason(), ")");
  return *allocator;
}

Allocator* set_pinned_allocator(Allocator* allocator) { return pinned_slot().exchange(allocator); }

}  // namespace kiln
