// All-reduce for Gloo by recursive doubling, for small and middle sizes.
//
// Note [Gloo all-reduce algorithms]
// gloo::allreduce runs a ring: a reduce-scatter and an all-gather, 2(P-1)
// steps each moving 1/P of the data, which is bandwidth-optimal and what
// large buffers want. Below a few megabytes a step costs mostly latency,
// not bytes: on loopback, each message is a hand-off between a rank's
// calling thread, its communication thread and gloo's event loop. Recursive
// doubling needs log2(P) steps instead: in step k rank r exchanges its whole
// buffer with rank r XOR 2^k and both reduce the two, so after the last
// step every rank holds the reduction over all P. With 2 ranks that is one
// exchange instead of two. It moves log2(P) times the buffer per rank
// (the ring 2(P-1)/P times), so it is used up to kRecursiveDoublingMaxBytes
// and for power-of-two world sizes only; everything else takes the ring.
// (MPICH chooses between the same two by size, for the same reasons.)
// Its steps also carry the ranks' calls, so that the always-on agreement
// check adds no message of its own (Note [Calls in the first message]).
//
// Every rank ends with bitwise the same result: in each step the two
// partners reduce the same two operands in opposite order, and every
// ReduceFunction here is commutative (a + b, a * b, wrapping integers, and
// max/min that return a NaN if either is one).
#pragma once

#include <cstddef>

#include "distributed/backends/gloo/call_exchange.h"
#include "distributed/backends/gloo/gloo_reduce.h"

namespace kiln::distributed::gloo_backend {

// The largest all-reduce that goes by recursive doubling (measured with
// build/bench/allreduce, docs/BENCHMARKS.md).
inline constexpr size_t kRecursiveDoublingMaxBytes = size_t{4} << 20;

// True if an all-reduce of `bytes` over `world_size` ranks should use
// recursive_doubling_all_reduce.
bool use_recursive_doubling(size_t bytes, int world_size);

// data: (elements) of `element_size` bytes, reduced in place over all ranks
// with `reduce`, its steps carrying `exchange`'s calls (Note [Calls in the
// first message]). The exchange's world size must be a power of two. Throws the
// exchange's error, with `data` unchanged, when the ranks' calls disagree;
// gloo::IoException when the steps do not finish within the exchange's
// timeout.
void recursive_doubling_all_reduce(CallExchange& exchange, void* data, size_t elements, size_t element_size,
                                   const ReduceFunction& reduce);

}  // namespace kiln::distributed::gloo_backend
