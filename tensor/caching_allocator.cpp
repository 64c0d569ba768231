// The caching allocator's bookkeeping (Note [Caching allocator] in
// caching_allocator.h).
#include "tensor/caching_allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <utility>

#include "tensor/error.h"

namespace kiln {

// One piece of a segment: the whole segment at first, then the pieces that
// splitting leaves, linked in address order so that neighbours can merge.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;       // rounded
  size_t requested = 0;  // what the caller asked for, while handed out
  StreamHandle stream = nullptr;
  Pool* pool = nullptr;  // the pool its segment came from, for its whole life
  // False only while the block sits in its pool: handed-out blocks and freed
  // ones waiting for events must not merge with a neighbour.
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamHandle> stream_uses;  // streams other than `stream` (record_stream)
};

namespace {

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

std::string mib(size_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buffer;
}

}  // namespace

// Pools are ordered by stream, then size, then address: the best fit for a
// stream is the first block at or after (stream, size).
bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  const auto sa = reinterpret_cast<uintptr_t>(a->stream), sb = reinterpret_cast<uintptr_t>(b->stream);
  if (sa != sb) return sa < sb;
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(std::string owner, std::string device, DeviceMemorySource* source)
    : owner_(std::move(owner)), device_(std::move(device)), source_(source) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events(/*wait=*/true);
  release_cached_segments();
}

size_t CachingAllocator::round_size(size_t nbytes) {
  return nbytes < kMinBlockSize ? kMinBlockSize : round_up(nbytes, kMinBlockSize);
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return round_up(rounded, kRoundLarge);
}

void* CachingAllocator::allocate(size_t nbytes, StreamHandle stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  process_events(/*wait=*/false);
  const size_t rounded = round_size(nbytes);
  Pool& pool = pool_for(rounded);
  Block* block = find_free_block(pool, rounded, stream);
  if (block == nullptr) block = new_segment(pool, rounded, stream, nbytes);
  block = split(block, rounded);
  block->allocated = true;
  block->requested = nbytes;
  allocated_.emplace(block->ptr, block);
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += nbytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.active_blocks;
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool& pool, size_t rounded, StreamHandle stream) {
  Block key;
  key.stream = stream;
  key.size = rounded;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(Pool& pool, size_t rounded, StreamHandle stream,
                                                       size_t requested) {
  const size_t size = segment_size(rounded);
  ++stats_.malloc_calls;
  void* ptr = source_->malloc(size);
  if (ptr == nullptr) {
    // Nothing can be given back during a capture (Note [Caching allocator]).
    if (source_->capture_underway()) {
      ++stats_.ooms;
      throw_out_of_memory(requested, size);
    }
    // What the cache holds may be what the device lacks: give back every
    // whole cached segment (other streams' included) and try once more.
    ++stats_.alloc_retries;
    process_events(/*wait=*/true);
    release_cached_segments();
    ++stats_.malloc_calls;
    ptr = source_->malloc(size);
    if (ptr == nullptr) {
      ++stats_.ooms;
      throw_out_of_memory(requested, size);
    }
  }
  auto* block = new Block;
  block->ptr = static_cast<char*>(ptr);
  block->size = size;
  block->stream = stream;
  block->pool = &pool;
  ++stats_.segments;
  stats_.reserved_bytes += size;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return block;
}

CachingAllocator::Block* CachingAllocator::split(Block* block, size_t rounded) {
  const size_t remaining = block->size - rounded;
  // A large-pool rest of 1 MiB or less could only serve small requests,
  // which never come to the large pool: it would sit there unused.
  const bool worth_keeping = block->pool == &small_ ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!worth_keeping) return block;
  auto* rest = new Block;
  rest->ptr = block->ptr + rounded;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->pool = block->pool;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next != nullptr) rest->next->prev = rest;
  block->next = rest;
  block->size = rounded;
  block->pool->insert(rest);
  return block;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  // Storage frees each block once; a pointer this allocator did not hand out
  // is a bug elsewhere that must not corrupt the pools.
  if (it == allocated_.end()) return;
  Block* block = it->second;
  allocated_.erase(it);
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  --stats_.active_blocks;
  if (block->stream_uses.empty()) {
    free_block(block);
  } else if (source_->capture_underway()) {
    deferred_.push_back(block);  // its events are recorded once the capture ends
    ++stats_.pending_event_blocks;
  } else {
    release_after_uses(block);
  }
}

// Records an event on each stream that used `block` and keeps it pending
// until they complete, or frees it at once when no event is needed.
void CachingAllocator::release_after_uses(Block* block) {
  std::vector<void*> events;
  for (StreamHandle stream : block->stream_uses) {
    if (void* event = source_->record_event(stream)) events.push_back(event);
  }
  block->stream_uses.clear();
  if (events.empty()) {
    free_block(block);
  } else {
    pending_.emplace_back(block, std::move(events));
    ++stats_.pending_event_blocks;
  }
}

void CachingAllocator::free_block(Block* block) {
  block->allocated = false;
  Pool& pool = *block->pool;
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (prev->next != nullptr) prev->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void CachingAllocator::process_events(bool wait) {
  if (source_->capture_underway()) return;  // Note [Caching allocator]
  for (Block* block : deferred_) {
    --stats_.pending_event_blocks;
    release_after_uses(block);
  }
  deferred_.clear();
  auto done = [&](std::pair<Block*, std::vector<void*>>& entry) {
    for (void* event : entry.second) {
      if (wait) {
        source_->wait_event(event);
      } else if (!source_->event_done(event)) {
        return false;
      }
    }
    for (void* event : entry.second) source_->destroy_event(event);
    free_block(entry.first);
    --stats_.pending_event_blocks;
    return true;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), done), pending_.end());
}

void CachingAllocator::release_cached_segments() {
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr) {
        ++it;  // part of a segment that is partly in use
        continue;
      }
      it = pool->erase(it);
      source_->free(block->ptr);
      ++stats_.free_calls;
      --stats_.segments;
      stats_.reserved_bytes -= block->size;
      delete block;
    }
  }
}

void CachingAllocator::record_stream(void* ptr, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  KILN_CHECK(it != allocated_.end(), "record_stream: ", ptr, " is not the start of a block handed out by the ", owner_,
             " on ", device_, " (pass the tensor's storage, not a view into it)");
  Block* block = it->second;
  if (stream == block->stream) return;  // its own stream is ordered already
  if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end()) {
    block->stream_uses.push_back(stream);
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  KILN_CHECK(!source_->capture_underway(), owner_, ": empty_cache on ", device_,
             " while a CUDA graph capture is underway: memory cannot be given back during a capture");
  process_events(/*wait=*/true);
  release_cached_segments();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CachingAllocator::throw_out_of_memory(size_t requested, size_t segment) {
  const CachingAllocatorStats& s = stats_;
  KILN_FAIL(owner_, ": out of memory on ", device_, ": tried to allocate ", requested, " bytes (", mib(requested),
            ", a new segment of ", mib(segment), ") ",
            source_->capture_underway()
                ? "during a CUDA graph capture, which cannot return the cache (capture with more memory free)"
                : "after returning the cache",
            "; the allocator holds ",
            mib(s.allocated_bytes), " allocated in ", s.active_blocks, " blocks, ", mib(s.reserved_bytes),
            " reserved in ", s.segments, " segments (", mib(s.reserved_bytes - s.allocated_bytes),
            " cached but not reusable for this request), peak allocated ", mib(s.peak_allocated_bytes), ", ",
            s.malloc_calls, " device malloc calls", source_->device_memory_report());
}

}  // namespace kiln
