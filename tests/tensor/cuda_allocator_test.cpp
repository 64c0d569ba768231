// The caching allocator's bookkeeping (tensor/caching_allocator.h) on the
// CPU: host memory stands in for the device and the test decides when
// events complete, so bins, splitting, merging, stream-aware reuse and the
// out-of-memory path are checked without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "tensor/caching_allocator.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// A "device" of `capacity` bytes of host memory with events the test completes.
class FakeDevice final : public DeviceMemorySource {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override {
    for (auto& [ptr, size] : live_) std::free(ptr);
  }

  void* malloc(size_t nbytes) override {
    if (used_ + nbytes > capacity_) return nullptr;
    void* ptr = std::aligned_alloc(512, nbytes);
    used_ += nbytes;
    live_[ptr] = nbytes;
    return ptr;
  }
  void free(void* ptr) override {
    if (capturing) ++calls_during_capture;
    used_ -= live_.at(ptr);
    live_.erase(ptr);
    std::free(ptr);
  }

  struct Event {
    StreamHandle stream;
    bool done = false;
  };
  void* record_event(StreamHandle stream) override {
    if (capturing) ++calls_during_capture;
    events_.push_back(new Event{stream});
    return events_.back();
  }
  bool event_done(void* event) override {
    if (capturing) ++calls_during_capture;
    return static_cast<Event*>(event)->done;
  }
  void wait_event(void* event) override {
    if (capturing) ++calls_during_capture;
    ++waits;
    static_cast<Event*>(event)->done = true;
  }
  void destroy_event(void* event) override {
    events_.erase(std::find(events_.begin(), events_.end(), event));
    delete static_cast<Event*>(event);
  }
  std::string device_memory_report() override {
    return detail::str("; the fake device has ", capacity_ - used_, " bytes free");
  }
  bool capture_underway() override { return capturing; }

  // Events not yet destroyed, oldest first.
  const std::vector<Event*>& events() const { return events_; }
  size_t used() const { return used_; }
  int waits = 0;
  bool capturing = false;        // a CUDA graph capture is running
  int calls_during_capture = 0;  // event or free calls made while one was: a real device refuses them

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
  std::vector<Event*> events_;
};

StreamHandle stream(int i) { return reinterpret_cast<StreamHandle>(static_cast<uintptr_t>(i)); }

char* at(void* p) { return static_cast<char*>(p); }

TEST(CachingAllocator, RoundsSizesAndSizesSegmentsPerPool) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB + 512), 12 * kMiB);
}

TEST(CachingAllocator, SmallRequestsSplitOneSegment) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  EXPECT_EQ(cache.allocate(0, stream(0)), nullptr);
  void* a = cache.allocate(1000, stream(0));
  void* b = cache.allocate(3000, stream(0));
  EXPECT_EQ(at(b), at(a) + 1024);  // the rest after `a` is the best fit for `b`
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.malloc_calls, 1);
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.allocated_bytes, 1024u + 3072u);
  EXPECT_EQ(s.requested_bytes, 4000u);
  EXPECT_EQ(s.active_blocks, 2);
  cache.deallocate(a);
  cache.deallocate(b);
  cache.deallocate(nullptr);
  EXPECT_EQ(cache.stats().allocated_bytes, 0u);
  EXPECT_EQ(cache.stats().reserved_bytes, 2 * kMiB);  // cached, not given back
}

TEST(CachingAllocator, FreedBlockIsReusedWithoutAskingTheDevice) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(4096, stream(0));
  cache.deallocate(a);
  void* b = cache.allocate(4000, stream(0));
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.stats().malloc_calls, 1);
  cache.deallocate(b);
}

TEST(CachingAllocator, FreeNeighboursMergeBackIntoTheSegment) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  const size_t quarter = 512 * 1024;
  void* a = cache.allocate(quarter, stream(0));
  void* b = cache.allocate(quarter, stream(0));
  void* c = cache.allocate(quarter, stream(0));
  ASSERT_EQ(at(b), at(a) + quarter);
  ASSERT_EQ(at(c), at(b) + quarter);
  cache.deallocate(a);
  cache.deallocate(b);  // merges with a: one free 1 MiB block at a
  void* ab = cache.allocate(kMiB, stream(0));
  EXPECT_EQ(ab, a);
  EXPECT_EQ(cache.stats().malloc_calls, 1);
  cache.deallocate(c);   // merges with the free quarter after it
  cache.deallocate(ab);  // and now with both: the segment is whole again
  cache.empty_cache();
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.free_calls, 1);
  EXPECT_EQ(s.segments, 0);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(device.used(), 0u);
}

TEST(CachingAllocator, EmptyCacheKeepsSegmentsThatAreStillInUse) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(4096, stream(0));
  void* big = cache.allocate(2 * kMiB, stream(0));
  cache.deallocate(big);
  cache.empty_cache();  // the large segment goes, the small one holds `a`
  EXPECT_EQ(cache.stats().reserved_bytes, 2 * kMiB);
  EXPECT_EQ(cache.stats().free_calls, 1);
  cache.deallocate(a);
  cache.empty_cache();
  EXPECT_EQ(cache.stats().reserved_bytes, 0u);
}

TEST(CachingAllocator, LargeBlocksSplitOnlyWhenTheRestIsOverOneMiB) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(3 * kMiB, stream(0));  // a 20 MiB segment: 3 + 17 MiB
  void* b = cache.allocate(5 * kMiB, stream(0));  // 5 + 12 MiB
  EXPECT_EQ(at(b), at(a) + 3 * kMiB);
  cache.deallocate(a);
  // Best fit is a's 3 MiB; its 1 MiB rest is not split off.
  void* c = cache.allocate(2 * kMiB, stream(0));
  EXPECT_EQ(c, a);
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 8 * kMiB);
  EXPECT_EQ(s.requested_bytes, 7 * kMiB);
  EXPECT_EQ(s.malloc_calls, 1);
  // 12 MiB left after b: a 4 MiB request is cut from it.
  void* d = cache.allocate(4 * kMiB, stream(0));
  EXPECT_EQ(at(d), at(b) + 5 * kMiB);
  for (void* p : {b, c, d}) cache.deallocate(p);
}

TEST(CachingAllocator, SmallAndLargeRequestsUseSeparatePools) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* large = cache.allocate(2 * kMiB, stream(0));
  cache.deallocate(large);
  // The free 20 MiB large segment does not serve a small request.
  void* small = cache.allocate(4096, stream(0));
  EXPECT_EQ(cache.stats().malloc_calls, 2);
  EXPECT_EQ(cache.stats().reserved_bytes, 22 * kMiB);
  cache.deallocate(small);
}

TEST(CachingAllocator, BlocksFreedOnOneStreamAreNotGivenToAnother) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(4096, stream(1));
  cache.deallocate(a);
  void* b = cache.allocate(4096, stream(2));
  EXPECT_NE(b, a);
  EXPECT_EQ(cache.stats().malloc_calls, 2);  // stream 2 has a segment of its own
  void* c = cache.allocate(4096, stream(1));
  EXPECT_EQ(c, a);
  cache.deallocate(b);
  cache.deallocate(c);
}

TEST(CachingAllocator, RecordStreamHoldsTheBlockUntilTheEventCompletes) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(4096, stream(1));
  cache.record_stream(a, stream(1));  // its own stream: nothing to wait for
  cache.record_stream(a, stream(2));
  cache.record_stream(a, stream(2));  // once is enough
  cache.deallocate(a);
  ASSERT_EQ(device.events().size(), 1u);
  EXPECT_EQ(device.events()[0]->stream, stream(2));
  EXPECT_EQ(cache.stats().pending_event_blocks, 1);
  EXPECT_EQ(cache.stats().allocated_bytes, 0u);

  void* b = cache.allocate(4096, stream(1));  // stream 2 may still read a
  EXPECT_NE(b, a);
  device.events()[0]->done = true;
  void* c = cache.allocate(4096, stream(1));
  EXPECT_EQ(c, a);
  EXPECT_TRUE(device.events().empty());
  EXPECT_EQ(cache.stats().pending_event_blocks, 0);
  EXPECT_EQ(device.waits, 0);  // never blocked the host
  cache.deallocate(b);
  cache.deallocate(c);
}

TEST(CachingAllocator, EmptyCacheWaitsForPendingEvents) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(4096, stream(1));
  cache.record_stream(a, stream(2));
  cache.deallocate(a);
  cache.empty_cache();
  EXPECT_EQ(device.waits, 1);
  EXPECT_EQ(cache.stats().reserved_bytes, 0u);
  EXPECT_EQ(device.used(), 0u);
}

// During a capture (Note [Caching allocator]) no event is recorded, queried
// or waited for and nothing is freed; the deferred work happens once the
// capture has ended.
TEST(CachingAllocator, ACaptureDefersEventsAndFreesUntilItEnds) {
  FakeDevice device(24 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* before = cache.allocate(4096, stream(1));
  void* during = cache.allocate(4096, stream(1));
  cache.record_stream(before, stream(2));
  cache.record_stream(during, stream(2));
  cache.deallocate(before);  // an event on stream 2, as usual
  ASSERT_EQ(device.events().size(), 1u);

  device.capturing = true;
  cache.deallocate(during);  // no event can be recorded: deferred
  EXPECT_EQ(device.events().size(), 1u);
  EXPECT_EQ(cache.stats().pending_event_blocks, 2);
  device.events()[0]->done = true;
  void* other = cache.allocate(4096, stream(1));  // cached memory still serves...
  EXPECT_NE(other, before);                      // ...but the completed event is not even queried
  EXPECT_NE(other, during);
  EXPECT_EQ(cache.stats().pending_event_blocks, 2);
  // No room and nothing may be given back: out of memory at once, saying why.
  expect_error([&] { cache.allocate(23 * kMiB, stream(3)); },
               "during a CUDA graph capture, which cannot return the cache (capture with more memory free)");
  EXPECT_EQ(cache.stats().alloc_retries, 0);
  expect_error([&] { cache.empty_cache(); },
               "fake allocator: empty_cache on fake:0 while a CUDA graph capture is underway");
  EXPECT_EQ(device.calls_during_capture, 0);

  device.capturing = false;
  cache.deallocate(other);
  void* after = cache.allocate(4096, stream(1));  // processes the events: `before` is free again
  EXPECT_EQ(after, before);
  ASSERT_EQ(device.events().size(), 1u);  // `during`'s event, recorded now
  EXPECT_EQ(device.events()[0]->stream, stream(2));
  EXPECT_EQ(cache.stats().pending_event_blocks, 1);
  device.events()[0]->done = true;
  cache.deallocate(after);
  cache.empty_cache();
  EXPECT_EQ(cache.stats().pending_event_blocks, 0);
  EXPECT_EQ(cache.stats().reserved_bytes, 0u);
  EXPECT_EQ(device.used(), 0u);
}

TEST(CachingAllocator, RecordStreamOfAForeignPointerThrows) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(4096, stream(0));
  expect_error([&] { cache.record_stream(at(a) + 512, stream(1)); },
               "is not the start of a block handed out by the fake allocator on fake:0");
  cache.deallocate(a);
  expect_error([&] { cache.record_stream(a, stream(1)); }, "record_stream: ");
}

TEST(CachingAllocator, OutOfMemoryReturnsTheCacheAndRetriesThenReportsStatistics) {
  FakeDevice device(24 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(2 * kMiB, stream(0));  // a 20 MiB segment
  cache.deallocate(a);
  // Stream 1 may not use stream 0's cached 20 MiB, and 12 MiB more do not
  // fit: the cache is given back and the request retried.
  void* b = cache.allocate(12 * kMiB, stream(1));
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.alloc_retries, 1);
  EXPECT_EQ(s.free_calls, 1);
  EXPECT_EQ(s.malloc_calls, 3);
  EXPECT_EQ(s.reserved_bytes, 12 * kMiB);
  EXPECT_EQ(s.ooms, 0);

  try {
    cache.allocate(16 * kMiB, stream(0));
    ADD_FAILURE() << "16 MiB fit in 12 MiB left of a 24 MiB device";
  } catch (const Error& e) {
    const std::string m = e.message();
    for (const char* part : {"fake allocator: out of memory on fake:0: tried to allocate 16777216 bytes (16.00 MiB",
                             "12.00 MiB allocated in 1 blocks", "12.00 MiB reserved in 1 segments",
                             "5 device malloc calls", "; the fake device has 12582912 bytes free"}) {
      EXPECT_NE(m.find(part), std::string::npos) << "message was: " << m << "\nexpected: " << part;
    }
  }
  EXPECT_EQ(cache.stats().ooms, 1);
  EXPECT_EQ(cache.stats().allocated_bytes, 12 * kMiB);  // nothing lost by the failure
  cache.deallocate(b);
}

TEST(CachingAllocator, PeakStatisticsResetToTheCurrentValues) {
  FakeDevice device(64 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  void* a = cache.allocate(4 * kMiB, stream(0));
  void* b = cache.allocate(4096, stream(0));
  cache.deallocate(a);
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 4 * kMiB + 4096);
  EXPECT_EQ(s.peak_reserved_bytes, 22 * kMiB);
  cache.empty_cache();
  cache.reset_peak_stats();
  s = cache.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 4096u);
  EXPECT_EQ(s.peak_reserved_bytes, 2 * kMiB);
  cache.deallocate(b);
}

// Random sizes on two streams: live blocks never overlap (each keeps its
// own byte pattern), and once everything is freed every segment has merged
// back whole, so empty_cache returns all device memory.
TEST(CachingAllocator, RandomTrafficNeverOverlapsAndMergesBackCompletely) {
  FakeDevice device(1024 * kMiB);
  CachingAllocator cache("fake allocator", "fake:0", &device);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, 99);
  struct Live {
    void* ptr;
    size_t size;
    unsigned char pattern;
  };
  std::vector<Live> live;
  auto check = [](const Live& l) {
    const auto* p = static_cast<const unsigned char*>(l.ptr);
    return std::all_of(p, p + l.size, [&](unsigned char c) { return c == l.pattern; });
  };
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || pick(rng) < 50) {
      const int kind = pick(rng);
      size_t size = kind < 70 ? 1 + rng() % 8192 : kind < 90 ? 1 + rng() % (3 * kMiB) : 1 + rng() % (12 * kMiB);
      void* ptr = cache.allocate(size, stream(1 + static_cast<int>(rng() % 2)));
      const auto pattern = static_cast<unsigned char>(step);
      std::memset(ptr, pattern, size);
      live.push_back({ptr, size, pattern});
    } else {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(check(live[i])) << "block of " << live[i].size << " bytes was overwritten";
      if (pick(rng) < 20) cache.record_stream(live[i].ptr, stream(3));
      cache.deallocate(live[i].ptr);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      for (FakeDevice::Event* e : device.events()) e->done = pick(rng) < 50 || e->done;
    }
  }
  for (const Live& l : live) {
    ASSERT_TRUE(check(l));
    cache.deallocate(l.ptr);
  }
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.active_blocks, 0);
  cache.empty_cache();
  s = cache.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.segments, 0);
  EXPECT_EQ(s.pending_event_blocks, 0);
  EXPECT_EQ(s.free_calls, s.malloc_calls);
  EXPECT_EQ(device.used(), 0u);
}

}  // namespace
}  // namespace kiln
