// A caching allocator for device memory that is slow to obtain and to give
// back, independent of any device API (the CUDA backend drives it).
//
// Note [Caching allocator]
// cudaMalloc costs tens of microseconds and cudaFree synchronizes the whole
// device; a training step allocates hundreds of temporaries. So memory taken
// from the device is never given back on free: blocks go to a cache and are
// handed out again, as in PyTorch's CUDACachingAllocator.
// - Sizes are rounded up to 512 bytes. Requests of at most 1 MiB come from
//   the small pool, whose segments (one raw allocation each) are 2 MiB;
//   larger ones from the large pool, with 20 MiB segments for requests under
//   10 MiB and segments of the request rounded up to 2 MiB beyond. Keeping
//   small blocks apart stops them from fragmenting the large segments.
// - A request takes the smallest cached block that fits (best fit). A block
//   larger than needed is split, and the rest stays cached, if the rest is
//   worth keeping (at least 512 bytes in the small pool, over 1 MiB in the
//   large one); a freed block merges with free neighbours of its segment.
// - Stream-aware reuse: a block belongs to the stream it was allocated on.
//   Work on one stream runs in order, so a block freed while kernels queued
//   on its stream still use it can be handed to the next request on that
//   stream at once: the new user's kernels queue behind the old ones. It is
//   never handed to another stream, whose kernels could run first. When a
//   block is used on other streams too, the user says so with record_stream;
//   its free then records an event on each of those streams, and the block
//   returns to the cache only when all events have completed.
// - While a CUDA graph is being captured (source->capture_underway()) the
//   device refuses to record, query or wait for events and to free memory
//   (those calls would also break the capture). The allocator then makes
//   none: a block freed with uses on other streams waits, with its streams,
//   until the capture has ended and its events can be recorded; pending
//   events are left alone; and an allocation that finds no room fails at
//   once, as nothing can be given back.
// - When the device runs out, the cached blocks that are whole segments are
//   given back (waiting for pending events first) and the request retried;
//   if that fails too, kiln::Error says how much was asked for and what the
//   allocator holds.
// The device API comes in through DeviceMemorySource, so the bookkeeping is
// tested on the CPU with host memory standing in for the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln {

// A stream as the allocator sees it: an opaque handle compared by value
// (a cudaStream_t in the CUDA backend; the default stream may be null).
using StreamHandle = void*;

// The raw memory and events of one device.
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  // `nbytes` of device memory, or nullptr when the device has too little
  // left (other failures throw kiln::Error).
  virtual void* malloc(size_t nbytes) = 0;
  // Gives back memory from malloc. Must not throw.
  virtual void free(void* ptr) = 0;
  // An event marking the work queued on `stream` so far, or nullptr when that
  // work is known to be done already. Must not throw.
  virtual void* record_event(StreamHandle stream) = 0;
  // Whether the work before `event` has finished (never blocks), and blocking
  // until it has. Must not throw.
  virtual bool event_done(void* event) = 0;
  virtual void wait_event(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
  // Whether a CUDA graph capture is running (see the Note): no event may be
  // recorded, queried or waited for then, and no memory freed.
  virtual bool capture_underway() { return false; }
  // Appended to the out-of-memory message: what the device itself reports
  // (free and total memory), starting with "; ".
  virtual std::string device_memory_report() { return ""; }
};

// What one caching allocator holds; "block" sizes are the rounded sizes.
struct CachingAllocatorStats {
  size_t allocated_bytes = 0;       // blocks handed out now
  size_t requested_bytes = 0;       // what callers asked for, before rounding
  size_t reserved_bytes = 0;        // segments obtained from the device
  size_t peak_allocated_bytes = 0;  // since the start or reset_peak_stats()
  size_t peak_reserved_bytes = 0;
  int64_t active_blocks = 0;         // allocations not yet freed
  int64_t segments = 0;              // raw allocations held
  int64_t pending_event_blocks = 0;  // freed, waiting for other streams (or for a capture to end)
  int64_t malloc_calls = 0;          // DeviceMemorySource::malloc, failed ones included
  int64_t free_calls = 0;
  int64_t alloc_retries = 0;  // requests that emptied the cache and tried again
  int64_t ooms = 0;           // requests that failed even then
};

class CachingAllocator {
 public:
  // `owner` ("CUDA allocator") and `device` ("cuda:0") name it in error
  // messages. `source` must outlive this.
  CachingAllocator(std::string owner, std::string device, DeviceMemorySource* source);
  // Gives back the cached segments; blocks still handed out are not freed.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `nbytes` (nullptr for 0), aligned to 512 bytes within the
  // source's alignment, for use on `stream`. Throws kiln::Error when the
  // device has no room even after emptying the cache.
  void* allocate(size_t nbytes, StreamHandle stream);
  // Returns a block from allocate() (nullptr is ignored). Never throws.
  void deallocate(void* ptr);
  // Says that the block starting at `ptr` is used by work on `stream` too, so
  // that its memory is not reused before that work ends. Throws kiln::Error
  // if `ptr` is not a block handed out by this allocator.
  void record_stream(void* ptr, StreamHandle stream);
  // Gives every cached whole segment back to the device (after waiting for
  // blocks whose events are pending). Throws kiln::Error while a capture is
  // underway.
  void empty_cache();

  CachingAllocatorStats stats() const;
  void reset_peak_stats();

  // The rounded size a request of `nbytes` takes, and the size of the segment
  // the allocator obtains when no cached block fits one of `rounded` bytes.
  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = size_t{1} << 20;      // largest request of the small pool
  static constexpr size_t kSmallSegment = size_t{2} << 20;   // segments of the small pool
  static constexpr size_t kLargeSegment = size_t{20} << 20;  // for large requests under kMinLargeAlloc
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;
  static constexpr size_t kRoundLarge = size_t{2} << 20;  // larger segments round up to this

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;

  Pool& pool_for(size_t rounded) { return rounded <= kSmallSize ? small_ : large_; }
  Block* find_free_block(Pool& pool, size_t rounded, StreamHandle stream);
  Block* new_segment(Pool& pool, size_t rounded, StreamHandle stream, size_t requested);
  Block* split(Block* block, size_t rounded);
  void free_block(Block* block);
  void release_after_uses(Block* block);
  void process_events(bool wait);
  void release_cached_segments();
  [[noreturn]] void throw_out_of_memory(size_t requested, size_t rounded);

  std::string owner_;
  std::string device_;
  DeviceMemorySource* source_;
  mutable std::mutex mutex_;
  Pool small_;
  Pool large_;
  std::unordered_map<void*, Block*> allocated_;
  // Freed blocks waiting for their events, in the order they were freed.
  std::vector<std::pair<Block*, std::vector<void*>>> pending_;
  // Freed during a capture with uses on other streams: no events yet.
  std::vector<Block*> deferred_;
  CachingAllocatorStats stats_;
};

}  // namespace kiln
