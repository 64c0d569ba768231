// All-reduce through shared memory, for a Gloo group whose ranks all run on
// one host.
//
// Note [Same-host all-reduce through shared memory]
// On one machine, Gloo's TCP transport moves every byte through the kernel
// (a copy into the sender's socket buffer, another out of the receiver's)
// and every message through three threads per rank: the caller, the
// group's communication thread and Gloo's event loop, each hand-off a
// futex wake-up that costs tens of microseconds, and on a busy or virtual
// machine sometimes milliseconds. For the 248 KB of LeNet's gradients that
// latency is nearly all of the all-reduce (docs/BENCHMARKS.md, issue 7).
// NCCL avoids it the same way on one node: the ranks share memory.
//
// When every rank of a group reports the same host identity (hostname, boot
// id, and the IPC and PID namespaces: two containers on one host that do not
// share /dev/shm or cannot see each other's processes do not qualify), rank 0
// creates a POSIX shared-memory segment, the others map it, and it is
// unlinked at once (the mappings keep it alive, and nothing is left in
// /dev/shm if a rank dies). The segment holds, per rank, a slot of
// kSharedMemorySlotBytes and three counters on a cache line of their own,
// each written by that rank only:
//
//   arrived  the last chunk whose input the rank has copied into its slot
//   reduced  the last chunk whose share the rank has reduced (below)
//   done     the last chunk whose results the rank has copied out
//
// An all-reduce goes in chunks of at most one slot; chunk number s (counted
// over the group's life: every rank runs the same all-reduces in the same
// order on its one communication thread, Note [Gloo threads]) goes:
//   1. wait until every rank is done with chunk s-1 (they read my slot);
//      copy my input into my slot; arrived = s;
//   2. wait until every rank has arrived; reduce my share of the elements
//      (a 1/P range) over all P slots in rank order 0, 1, ..., P-1 into my
//      output, and copy it into the same range of my slot; reduced = s;
//   3. wait until every rank has reduced; copy every other rank's share of
//      the results from its slot; done = s.
// Each element is reduced once, by one rank, always in rank order, so every
// rank gets bitwise the same result and a rerun gets the same bits too
// (what DDP's deterministic mode needs). Each rank moves about 3x the chunk
// through memory, whatever P.
//
// Waiting spins first (a peer is usually a few microseconds away), then
// yields its core, then sleeps, so that a rank still computing on a machine
// with few cores gets them back. There is no connection to break when a peer
// dies, so a waiting rank checks every 100 ms that the ranks it waits for are
// still alive (their pids, recorded in the segment) and fails at once naming
// the one that is not; otherwise it fails after the group's timeout naming
// the ranks it still waits for and the step they have not reached.
//
// The segment also carries the always-on check that the ranks agree on each
// collective (Note [Always-on collective agreement]): every collective of the
// group, not only the all-reduces, writes its call into its rank's header
// (`announced`, `calls`) before it waits for anything, so a rank waiting
// here can see a peer that is in another collective and say so at once.
//
// Note [Same-host all-gather and reduce-scatter]
// FSDP gathers every unit's parameters twice a step and reduce-scatters its
// gradients once: over TCP each costs the same hand-offs as an all-reduce
// did (about 0.8 ms on this 2-core machine, however small). The slots serve
// them too, chunk s with the same counters:
// - all-gather: 1. wait until every rank is done with chunk s-1; copy my
//   input's chunk into my slot; arrived = s. 2. wait until every rank has
//   arrived; copy every rank's slot into its place in my output; done = s.
// - reduce-scatter: each rank's slot holds, for every destination rank d,
//   its chunk of block d (m elements each, m = slot / (P * element size)).
//   1. as above; 2. my output's chunk = the reduction, in rank order, of
//   every slot's piece for me; done = s.
// Each rank moves its input once and reads P chunks; nothing is waited for
// twice, so a chunk costs two rounds of waiting where all-reduce takes three.
//
// KILN_GLOO_SHM=0 in any rank's environment turns it off for the group, which
// then uses Gloo's TCP transport for every all-reduce (Note [Gloo all-reduce
// algorithms]); so does a rank that cannot create or map the segment (a full
// /dev/shm, say), after telling the others through the store.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "distributed/backends/gloo/gloo_reduce.h"
#include "distributed/collective_call.h"
#include "distributed/store.h"

namespace kiln::distributed::gloo_backend {

// Each rank's slot in the segment: an all-reduce larger than this goes in
// chunks of it.
inline constexpr size_t kSharedMemorySlotBytes = size_t{1} << 20;
// Calls kept per rank in the segment (Note [Always-on collective agreement]).
inline constexpr size_t kCallSlots = 4;

class SharedMemoryAllReduce {
 public:
  // Collective: every rank of the group calls it with the group's store
  // (keys go under "shm/"), its rank and size. Returns null, on every rank
  // alike, when the group cannot use shared memory (one rank, different
  // hosts, KILN_GLOO_SHM=0 on some rank, a segment that could not be made).
  // Throws kiln::Error if a peer does not answer within `timeout`.
  static std::unique_ptr<SharedMemoryAllReduce> connect(Store& store, int rank, int size, const std::string& group,
                                                        std::chrono::milliseconds timeout);
  ~SharedMemoryAllReduce();
  SharedMemoryAllReduce(const SharedMemoryAllReduce&) = delete;
  SharedMemoryAllReduce& operator=(const SharedMemoryAllReduce&) = delete;

  // data: (elements) of element_size bytes each, replaced by the reduction
  // over the ranks with `reduce`. `call` describes it; every rank must make
  // the same call, in the same order as its other collectives, or every rank
  // throws kiln::Error naming the disagreement before any data is reduced.
  // Throws kiln::Error naming the rank it waited for when a peer died or did
  // not arrive in `timeout`, or once abort() was called.
  void all_reduce(void* data, size_t elements, size_t element_size, const ReduceFunction& reduce,
                  const CollectiveCall& call, std::chrono::milliseconds timeout);

  // All-gather through the same slots (Note [Same-host all-gather and
  // reduce-scatter]): `output` (size * bytes) receives every rank's `input`
  // (bytes) in rank order. Checks `call` and throws as all_reduce does.
  void all_gather(void* output, const void* input, size_t bytes, const CollectiveCall& call,
                  std::chrono::milliseconds timeout);
  // Reduce-scatter: `input` holds size blocks of `elements`; `output`
  // (elements) receives the reduction over ranks of block rank(), reduced in
  // rank order as all_reduce does (so every run gives the same bits).
  void reduce_scatter(void* output, const void* input, size_t elements, size_t element_size,
                      const ReduceFunction& reduce, const CollectiveCall& call, std::chrono::milliseconds timeout);

  // For a collective that goes over TCP: announces `call` and returns once
  // every rank has announced the same one; throws as all_reduce does.
  void agree(const CollectiveCall& call, std::chrono::milliseconds timeout);

  // Makes every wait in progress or to come throw (the group was given up).
  void abort();

  // The last call `rank` announced (sequence 0 if none yet): exact, read
  // from the segment, even when that rank has stopped.
  CollectiveCall last_call(int rank) const;

  // One rank's counters in the segment (defined in the .cpp).
  struct RankState;

 private:
  SharedMemoryAllReduce(int rank, int size, std::string group, void* segment, size_t segment_bytes);

  using Clock = std::chrono::steady_clock;
  RankState& state(int rank) const;
  uint8_t* slot(int rank) const;
  void announce(const CollectiveCall& call);
  // Rank `rank`'s call number n, if it has announced it.
  std::optional<CollectiveCall> call_of(int rank, uint64_t n) const;
  // Throws unless every rank's current call equals `mine`.
  void check_agreement(const CollectiveCall& mine) const;
  // A peer announced a call other than `mine`: waits, as wait_for_all does,
  // for every rank to announce its call, then throws the disagreement, the
  // same on every rank.
  [[noreturn]] void raise_disagreement(const CollectiveCall& mine, Clock::time_point deadline,
                                       std::chrono::milliseconds timeout) const;
  // Waits until reached(r) for every other rank r; throws on a peer that
  // announced another call, a dead peer, the deadline or abort().
  template <class Reached>
  void wait_for_all(const Reached& reached, const char* what, const CollectiveCall& mine, Clock::time_point deadline,
                    std::chrono::milliseconds timeout) const;
  // wait_for_all until every other rank's `counter` has reached `target`
  // (a step of chunk `target`, Note [Same-host all-reduce through shared memory]).
  void all_at(std::atomic<uint64_t> RankState::*counter, uint64_t target, const char* what,
              const CollectiveCall& call, Clock::time_point deadline, std::chrono::milliseconds timeout) const;
  void all_reduce_chunk(uint8_t* data, size_t elements, size_t element_size, const ReduceFunction& reduce,
                        const CollectiveCall& call, bool first_chunk, Clock::time_point deadline,
                        std::chrono::milliseconds timeout);

  const int rank_;
  const int size_;
  const std::string group_;
  void* const segment_;
  const size_t segment_bytes_;
  uint64_t chunks_ = 0;     // chunks all-reduced so far, the s of the Note
  uint64_t announced_ = 0;  // collectives announced so far
  std::atomic<bool> aborted_{false};
};

}  // namespace kiln::distributed::gloo_backend
