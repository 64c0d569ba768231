// What one rank calls at collective #N: the part every rank must agree on.
//
// Note [Always-on collective agreement]
// Collectives match by order alone (Note [Collective fingerprints]): rank 0's
// 17th collective meets rank 1's 17th, whatever each one is. If they differ
// in element count, dtype, reduce op or root, a backend that only moves
// bytes computes garbage (the shared-memory all-reduce sums 10 floats of
// one rank with the first 10 of another's 1,000) or, over TCP, receives a
// message longer than the buffer it posted, which Gloo reports by throwing
// on its event-loop thread: std::terminate. Debug mode catches both, but at
// a store round trip per collective; a run that is not in debug mode must
// not silently average stale gradients either.
//
// So every collective of the Gloo backend checks, always, that the ranks
// agree on a CollectiveCall: (sequence, collective, reduce op, dtype,
// element count, root), 48 bytes. The check travels beside the data:
// - on one host, in the shared-memory segment: each rank writes its call
//   into its own header before it waits for its peers, and reads theirs
//   while it waits (Note [Same-host all-reduce through shared memory]). An
//   all-reduce waits for its peers anyway, so there the check is a compare
//   of a few words; other collectives wait once in shared memory for every
//   rank to announce its call before Gloo sees any byte.
// - across hosts, in the first message each pair of ranks exchanges, in
//   steps that end with every rank knowing every call (Note [Calls in the
//   first message] in distributed/backends/gloo/call_exchange.h). An
//   all-reduce by recursive doubling carries the calls in its own data
//   messages; other collectives exchange them before their data moves. No
//   message is ever longer than the receive it meets, so a disagreement
//   can never reach Gloo as a mismatched message.
// Either way the ranks see the same set of calls and decide alike: every rank
// raises a kiln::Error within milliseconds, naming the collective, its
// sequence number, each rank's call and the first rank that differs:
//
//   all_reduce #12: the ranks disagree: rank 0 calls all_reduce(float32, 10 elements, sum)
//   but rank 1 calls all_reduce(float32, 1000 elements, sum) (Note [Always-on collective agreement])
//
// Shapes are not compared (a [4, 5] against a [5, 4] of 20 elements is
// consistent bytes); debug mode's fingerprints still compare them.
//
// What the check costs, on one host and across hosts, is measured in
// docs/BENCHMARKS.md, "Always-on collective agreement". Across hosts
// bench/agreement_ab times it against a second group in the same processes
// made with ProcessGroupOptions::agreement_check off, the one way to turn
// the check off, which exists for that measurement.
//
// MPI and NCCL do not carry the check. Their bytes cannot carry a header,
// so it would be a separate exchange per collective: for MPI a blocking
// all-gather of the call on the operation thread, which made a 4 KB
// all-reduce 1.5x slower (bench/mpi_agreement_cost); for NCCL a device
// round trip to the host per collective, which would serialise the stream
// that overlaps communication with the backward pass. Both keep debug mode
// (KILN_DISTRIBUTED_DEBUG=1) for this.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace kiln::distributed {

enum class ReduceOp;

enum class CollectiveKind : uint32_t {
  AllReduce = 1,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  Gather,
  Scatter,
  AllToAll,
  Barrier,
  Send,  // a send's preamble (Note [Point-to-point preamble])
};

const char* collective_kind_name(CollectiveKind kind);

struct CollectiveCall {
  uint64_t sequence = 0;  // the group's collective number (1, 2, ...)
  CollectiveKind kind = CollectiveKind::Barrier;
  int32_t reduce_op = -1;  // a ReduceOp, or -1 for collectives that do not reduce
  int32_t dtype = -1;      // a DType, or -1 for a barrier
  int32_t root = -1;       // -1 for collectives without a root
  uint64_t elements = 0;   // this rank's input (all_gather, gather) or output element count

  static CollectiveCall make(uint64_t sequence, CollectiveKind kind, DType dtype, uint64_t elements,
                             int root = -1);
  static CollectiveCall make_reduction(uint64_t sequence, CollectiveKind kind, DType dtype, uint64_t elements,
                                       ReduceOp op, int root = -1);

  // "all_reduce(float32, 10 elements, sum)", "broadcast(int64, 3 elements, root 1)".
  std::string describe() const;
  // "float32, 10 elements".
  std::string describe_payload() const;

  static constexpr size_t kWords = 6;
  using Words = std::array<uint64_t, kWords>;
  Words encode() const;
  static CollectiveCall decode(const Words& words);

  bool operator==(const CollectiveCall&) const = default;
};

// calls[r] is rank r's call. Throws kiln::Error, the same on every rank that
// holds the same calls, naming the first rank whose call differs from rank
// 0's, when they do not all agree. `me` is this rank (named in the message).
void check_calls_agree(const std::vector<CollectiveCall>& calls, int me, const std::string& group);

}  // namespace kiln::distributed
