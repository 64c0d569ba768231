#include "distributed/backends/gloo/shared_memory_all_reduce.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "distributed/process_identity.h"
#include "tensor/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::distributed::gloo_backend {

// One rank's counters (Note [Same-host all-reduce through shared memory]),
// on a cache line of their own: only this rank writes them, the others spin
// reading them.
struct alignas(64) SharedMemoryAllReduce::RankState {
  std::atomic<uint64_t> arrived;
  std::atomic<uint64_t> reduced;
  std::atomic<uint64_t> done;
  int64_t pid;
  // Note [Always-on collective agreement]: the last collective whose call
  // this rank has written, and the calls themselves, call n in calls[n % 4].
  // A rank can be at most one collective ahead of a peer that is still
  // reading its call (it waits for that peer to announce the next one), so
  // two slots would do; four leave room.
  alignas(64) std::atomic<uint64_t> announced;
  std::atomic<uint64_t> calls[kCallSlots][CollectiveCall::kWords];
};

namespace {

using Clock = std::chrono::steady_clock;

// Processes share these counters through the mapping, so they must be
// plain memory words, not a lock hidden in the library.
static_assert(std::atomic<uint64_t>::is_always_lock_free);

constexpr size_t kPage = 4096;

size_t header_bytes(int size) {
  const size_t bytes = static_cast<size_t>(size) * sizeof(SharedMemoryAllReduce::RankState);
  return (bytes + kPage - 1) / kPage * kPage;
}

size_t segment_bytes(int size) { return header_bytes(size) + static_cast<size_t>(size) * kSharedMemorySlotBytes; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

void* map_segment(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Rank 0's side: a new segment of `bytes`, backed by memory now (a full
// /dev/shm fails here instead of with SIGBUS on a later write), its
// counters constructed. Null with `reason` set on failure.
void* create_segment(const std::string& name, size_t bytes, std::string& reason) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    reason = std::string("shm_open: ") + std::strerror(errno);
    return nullptr;
  }
  void* segment = nullptr;
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0) {
    reason = "allocating " + std::to_string(bytes) + " bytes: " + std::strerror(error);
  } else if ((segment = map_segment(fd, bytes)) == nullptr) {
    reason = std::string("mmap: ") + std::strerror(errno);
  }
  ::close(fd);
  if (segment == nullptr) {
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  return segment;
}

// The other ranks' side: rank 0's segment, if it has the size expected.
void* open_segment(const std::string& name, size_t bytes, std::string& reason) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    reason = "shm_open " + name + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat info {};
  void* segment = nullptr;
  if (::fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) != bytes) {
    reason = name + " is not " + std::to_string(bytes) + " bytes";
  } else if ((segment = map_segment(fd, bytes)) == nullptr) {
    reason = std::string("mmap: ") + std::strerror(errno);
  }
  ::close(fd);
  return segment;
}

std::vector<std::string> rank_keys(const std::string& prefix, int size) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  return keys;
}

}  // namespace

// ---- setting up ----------------------------------------------------------------------------

std::unique_ptr<SharedMemoryAllReduce> SharedMemoryAllReduce::connect(Store& store, int rank, int size,
                                                                      const std::string& group,
                                                                      std::chrono::milliseconds timeout) {
  if (size < 2) return nullptr;
  const char* setting = std::getenv("KILN_GLOO_SHM");
  const bool wanted = setting == nullptr || std::string(setting) != "0";
  store.set("shm/host/" + std::to_string(rank), wanted ? host_identity() : std::string());
  const std::vector<std::string> host_keys = rank_keys("shm/host/", size);
  store.wait(host_keys, timeout);
  const std::string mine = store.get_string(host_keys[rank]);
  for (const std::string& key : host_keys) {
    if (mine.empty() || store.get_string(key) != mine) return nullptr;
  }

  const size_t bytes = segment_bytes(size);
  std::string name;
  std::string reason;
  void* segment = nullptr;
  if (rank == 0) {
    std::random_device random;
    std::ostringstream unique;
    unique << "/kiln-gloo-" << ::getpid() << "-" << std::hex << random() << random();
    name = unique.str();
    segment = create_segment(name, bytes, reason);
    if (segment != nullptr) {
      for (int r = 0; r < size; ++r) {
        new (static_cast<RankState*>(segment) + r) RankState{};
      }
    }
    store.set("shm/name", segment != nullptr ? name : std::string());
  } else {
    store.wait({"shm/name"}, timeout);
    name = store.get_string("shm/name");
    if (name.empty()) {
      reason = "rank 0 could not create the segment";
    } else {
      segment = open_segment(name, bytes, reason);
    }
  }
  if (segment != nullptr) static_cast<RankState*>(segment)[rank].pid = ::getpid();
  if (segment == nullptr && (rank == 0 || !name.empty())) {
    std::fprintf(stderr, "kiln: gloo group '%s' rank %d: no shared memory for all_reduce (%s); it goes over TCP\n",
                 group.c_str(), rank, reason.c_str());
  }

  // Every rank says whether it mapped the segment; once all have answered,
  // the name can go (the mappings keep the memory).
  store.set("shm/mapped/" + std::to_string(rank), std::string(segment != nullptr ? "1" : "0"));
  const std::vector<std::string> mapped_keys = rank_keys("shm/mapped/", size);
  bool all_mapped = true;
  try {
    store.wait(mapped_keys, timeout);
    for (const std::string& key : mapped_keys) all_mapped = all_mapped && store.get_string(key) == "1";
  } catch (...) {
    if (rank == 0 && segment != nullptr) ::shm_unlink(name.c_str());
    if (segment != nullptr) ::munmap(segment, bytes);
    throw;
  }
  if (rank == 0 && segment != nullptr) ::shm_unlink(name.c_str());
  if (!all_mapped) {
    if (segment != nullptr) ::munmap(segment, bytes);
    return nullptr;
  }
  return std::unique_ptr<SharedMemoryAllReduce>(new SharedMemoryAllReduce(rank, size, group, segment, bytes));
}

SharedMemoryAllReduce::SharedMemoryAllReduce(int rank, int size, std::string group, void* segment,
                                             size_t segment_bytes)
    : rank_(rank), size_(size), group_(std::move(group)), segment_(segment), segment_bytes_(segment_bytes) {}

SharedMemoryAllReduce::~SharedMemoryAllReduce() { ::munmap(segment_, segment_bytes_); }

SharedMemoryAllReduce::RankState& SharedMemoryAllReduce::state(int rank) const {
  return static_cast<RankState*>(segment_)[rank];
}

uint8_t* SharedMemoryAllReduce::slot(int rank) const {
  return static_cast<uint8_t*>(segment_) + header_bytes(size_) + static_cast<size_t>(rank) * kSharedMemorySlotBytes;
}

// ---- waiting for the other ranks -------------------------------------------------------------

void SharedMemoryAllReduce::abort() { aborted_.store(true, std::memory_order_relaxed); }

std::optional<CollectiveCall> SharedMemoryAllReduce::call_of(int rank, uint64_t n) const {
  const RankState& st = state(rank);
  if (st.announced.load(std::memory_order_acquire) < n) return std::nullopt;
  CollectiveCall::Words words;
  for (size_t w = 0; w < CollectiveCall::kWords; ++w) {
    words[w] = st.calls[n % kCallSlots][w].load(std::memory_order_relaxed);
  }
  return CollectiveCall::decode(words);
}

CollectiveCall SharedMemoryAllReduce::last_call(int rank) const {
  const uint64_t n = state(rank).announced.load(std::memory_order_acquire);
  return n == 0 ? CollectiveCall{} : call_of(rank, n).value_or(CollectiveCall{});
}

void SharedMemoryAllReduce::announce(const CollectiveCall& call) {
  const uint64_t n = ++announced_;
  const CollectiveCall::Words words = call.encode();
  RankState& st = state(rank_);
  for (size_t w = 0; w < CollectiveCall::kWords; ++w) {
    st.calls[n % kCallSlots][w].store(words[w], std::memory_order_relaxed);
  }
  st.announced.store(n, std::memory_order_release);
}

void SharedMemoryAllReduce::check_agreement(const CollectiveCall& mine) const {
  // Compared in place: this runs on every all-reduce, and the list of calls
  // is needed only for the message.
  bool agree = true;
  for (int r = 0; r < size_ && agree; ++r) agree = r == rank_ || *call_of(r, announced_) == mine;
  if (agree) return;
  std::vector<CollectiveCall> calls(size_);
  for (int r = 0; r < size_; ++r) calls[r] = r == rank_ ? mine : *call_of(r, announced_);
  check_calls_agree(calls, rank_, group_);
}

void SharedMemoryAllReduce::raise_disagreement(const CollectiveCall& mine, Clock::time_point deadline,
                                               std::chrono::milliseconds timeout) const {
  // A rank not yet arrived is on its way (a live rank announces before it
  // waits); naming a guess for its call would make the ranks' messages differ.
  std::vector<CollectiveCall> calls(size_);
  for (int k = 0; k < size_; ++k) {
    if (k == rank_) {
      calls[k] = mine;
      continue;
    }
    auto next_check = Clock::now() + std::chrono::milliseconds(100);
    std::optional<CollectiveCall> theirs;
    while (!(theirs = call_of(k, announced_))) {
      KILN_CHECK(!aborted_.load(std::memory_order_relaxed), "gloo ", collective_kind_name(mine.kind), ": rank ",
                 rank_, " of group '", group_, "' stopped waiting in shared memory because the group was aborted");
      const auto now = Clock::now();
      KILN_CHECK(now < deadline, "gloo ", collective_kind_name(mine.kind), ": the ranks of group '", group_,
                 "' disagree on collective #", mine.sequence, ", and rank ", k, " has not announced its call within ",
                 timeout.count(), " ms (Note [Same-host all-reduce through shared memory])");
      if (now >= next_check) {
        const int64_t pid = state(k).pid;
        KILN_CHECK(process_alive(pid), "gloo ", collective_kind_name(mine.kind), ": the ranks of group '", group_,
                   "' disagree on collective #", mine.sequence, ", and rank ", k, " (pid ", pid,
                   ") is no longer running");
        next_check = now + std::chrono::milliseconds(100);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    calls[k] = *theirs;
  }
  check_calls_agree(calls, rank_, group_);
  KILN_FAIL("gloo ", mine.describe(), ": rank ", rank_, " saw a call other than its own, yet every rank's agrees");
}

template <class Reached>
void SharedMemoryAllReduce::wait_for_all(const Reached& reached, const char* what, const CollectiveCall& mine,
                                         Clock::time_point deadline, std::chrono::milliseconds timeout) const {
  const auto start = Clock::now();
  auto next_check = start + std::chrono::milliseconds(100);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    int spins = 0;
    while (!reached(r)) {
      // The clock is read every 64 spins.
      if (++spins % 64 != 0) {
        cpu_relax();
        continue;
      }
      // A peer that announced another call will never reach this step:
      // every rank finds the same disagreement and raises it.
      if (const std::optional<CollectiveCall> theirs = call_of(r, announced_); theirs && !(*theirs == mine)) {
        raise_disagreement(mine, deadline, timeout);
      }
      KILN_CHECK(!aborted_.load(std::memory_order_relaxed), "gloo ", collective_kind_name(mine.kind),
                 ": rank ", rank_, " of group '", group_,
                 "' stopped waiting in shared memory because the group was aborted");
      const auto now = Clock::now();
      if (now >= deadline) {
        KILN_FAIL("gloo ", collective_kind_name(mine.kind), ": rank ", rank_, " of group '", group_,
                  "' waited ", timeout.count(), " ms in shared memory for rank ", r, ", which has not ", what,
                  " (Note [Same-host all-reduce through shared memory])");
      }
      if (now >= next_check) {
        const int64_t pid = state(r).pid;
        KILN_CHECK(process_alive(pid), "gloo ", collective_kind_name(mine.kind), ": rank ", r, " of group '",
                   group_, "' (pid ", pid, ") is no longer running; rank ", rank_,
                   " was waiting in shared memory for it to have ", what);
        next_check = now + std::chrono::milliseconds(100);
      }
      // Spin for 50 us, then give the core away: yield for 2 ms, then
      // sleep, longer once the wait is clearly not a short one (a peer
      // evaluating or checkpointing) so that waiting ranks cost little CPU.
      const auto waited = now - start;
      if (waited < std::chrono::microseconds(50)) continue;
      if (waited < std::chrono::milliseconds(2)) {
        ::sched_yield();
      } else if (waited < std::chrono::milliseconds(50)) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
}

// ---- agreement for the collectives that go over TCP ----------------------------------------------

void SharedMemoryAllReduce::agree(const CollectiveCall& call, std::chrono::milliseconds timeout) {
  announce(call);
  const uint64_t n = announced_;
  wait_for_all([&](int r) { return state(r).announced.load(std::memory_order_acquire) >= n; },
               "announced its call", call, Clock::now() + timeout, timeout);
  check_agreement(call);
}

void SharedMemoryAllReduce::all_at(std::atomic<uint64_t> RankState::*counter, uint64_t target, const char* what,
                                   const CollectiveCall& call, Clock::time_point deadline,
                                   std::chrono::milliseconds timeout) const {
  wait_for_all([&](int r) { return (state(r).*counter).load(std::memory_order_acquire) >= target; }, what, call,
               deadline, timeout);
}

// ---- the all-reduce --------------------------------------------------------------------------

void SharedMemoryAllReduce::all_reduce(void* data, size_t elements, size_t element_size, const ReduceFunction& reduce,
                                       const CollectiveCall& call, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const size_t chunk = kSharedMemorySlotBytes / element_size;
  auto* bytes = static_cast<uint8_t*>(data);
  announce(call);
  for (size_t first = 0; first < elements; first += chunk) {
    all_reduce_chunk(bytes + first * element_size, std::min(chunk, elements - first), element_size, reduce, call,
                     /*first_chunk=*/first == 0, deadline, timeout);
  }
}

void SharedMemoryAllReduce::all_reduce_chunk(uint8_t* data, size_t elements, size_t element_size,
                                             const ReduceFunction& reduce, const CollectiveCall& call,
                                             bool first_chunk, Clock::time_point deadline,
                                             std::chrono::milliseconds timeout) {
  const uint64_t s = ++chunks_;
  // The steps of the Note, each waited for on every other rank.

  const size_t bytes = elements * element_size;
  // Each rank's share: a range of whole 64-byte lines, so that two ranks
  // never write one cache line.
  const size_t line = std::max<size_t>(1, 64 / element_size);
  const size_t per_rank = (elements + size_ - 1) / size_;
  const size_t share = (per_rank + line - 1) / line * line;
  auto first_of = [&](int r) { return std::min(elements, static_cast<size_t>(r) * share); };
  auto count_of = [&](int r) { return std::min(elements, first_of(r) + share) - first_of(r); };

  // 1. My input into my slot, once every rank has read the previous chunk out of it.
  all_at(&RankState::done, s - 1, "copied its results out of the previous chunk", call, deadline, timeout);
  std::memcpy(slot(rank_), data, bytes);
  state(rank_).arrived.store(s, std::memory_order_release);

  // 2. My share, reduced over every slot in rank order, once every rank has
  // arrived: by then every rank has announced its call, which must be mine
  // before any byte of theirs is summed.
  all_at(&RankState::arrived, s, "copied its input into shared memory", call, deadline, timeout);
  if (first_chunk) check_agreement(call);
  if (const size_t n = count_of(rank_); n > 0) {
    const size_t offset = first_of(rank_) * element_size;
    uint8_t* out = data + offset;
    reduce(out, slot(0) + offset, slot(1) + offset, n);
    for (int r = 2; r < size_; ++r) reduce(out, out, slot(r) + offset, n);
    std::memcpy(slot(rank_) + offset, out, n * element_size);
  }
  state(rank_).reduced.store(s, std::memory_order_release);

  // 3. Every other rank's share of the results.
  all_at(&RankState::reduced, s, "reduced its share", call, deadline, timeout);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || count_of(r) == 0) continue;
    const size_t offset = first_of(r) * element_size;
    std::memcpy(data + offset, slot(r) + offset, count_of(r) * element_size);
  }
  state(rank_).done.store(s, std::memory_order_release);
}

// ---- all-gather and reduce-scatter (Note [Same-host all-gather and reduce-scatter]) -----------

void SharedMemoryAllReduce::all_gather(void* output, const void* input, size_t bytes, const CollectiveCall& call,
                                       std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto* out = static_cast<uint8_t*>(output);
  const auto* in = static_cast<const uint8_t*>(input);
  announce(call);
  for (size_t first = 0; first < bytes; first += kSharedMemorySlotBytes) {
    const size_t n = std::min(kSharedMemorySlotBytes, bytes - first);
    const uint64_t s = ++chunks_;
    // 1. My chunk into my slot, once every rank has read the previous one.
    all_at(&RankState::done, s - 1, "copied its results out of the previous chunk", call, deadline, timeout);
    std::memcpy(slot(rank_), in + first, n);
    state(rank_).arrived.store(s, std::memory_order_release);
    // 2. Every rank's chunk into its place, once all have arrived (and
    // announced a call, which must be mine before any byte is taken).
    all_at(&RankState::arrived, s, "copied its input into shared memory", call, deadline, timeout);
    if (first == 0) check_agreement(call);
    for (int r = 0; r < size_; ++r) {
      std::memcpy(out + static_cast<size_t>(r) * bytes + first, r == rank_ ? in + first : slot(r), n);
    }
    state(rank_).reduced.store(s, std::memory_order_release);
    state(rank_).done.store(s, std::memory_order_release);
  }
}

void SharedMemoryAllReduce::reduce_scatter(void* output, const void* input, size_t elements, size_t element_size,
                                           const ReduceFunction& reduce, const CollectiveCall& call,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto* out = static_cast<uint8_t*>(output);
  const auto* in = static_cast<const uint8_t*>(input);
  // m elements of each of the size_ blocks per chunk.
  const size_t m = std::max<size_t>(1, kSharedMemorySlotBytes / (static_cast<size_t>(size_) * element_size));
  announce(call);
  for (size_t first = 0; first < elements; first += m) {
    const size_t n = std::min(m, elements - first), piece = n * element_size;
    const uint64_t s = ++chunks_;
    // 1. My chunk of every block into my slot, block d at d * piece.
    all_at(&RankState::done, s - 1, "copied its results out of the previous chunk", call, deadline, timeout);
    for (int d = 0; d < size_; ++d) {
      std::memcpy(slot(rank_) + static_cast<size_t>(d) * piece,
                  in + (static_cast<size_t>(d) * elements + first) * element_size, piece);
    }
    state(rank_).arrived.store(s, std::memory_order_release);
    // 2. My block's chunk, reduced over every rank's slot in rank order.
    all_at(&RankState::arrived, s, "copied its input into shared memory", call, deadline, timeout);
    if (first == 0) check_agreement(call);
    const size_t mine = static_cast<size_t>(rank_) * piece;
    uint8_t* target = out + first * element_size;
    reduce(target, slot(0) + mine, slot(1) + mine, n);
    for (int r = 2; r < size_; ++r) reduce(target, target, slot(r) + mine, n);
    state(rank_).reduced.store(s, std::memory_order_release);
    state(rank_).done.store(s, std::memory_order_release);
  }
}

}  // namespace kiln::distributed::gloo_backend
