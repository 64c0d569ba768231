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
//
// Every rank ends with bitwise the same result: in each step the two
// partners reduce the same two operands in opposite order, and every
// ReduceFunction here is commutative (a + b, a * b, wrapping integers, and
// max/min that return a NaN if either is one).
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "distributed/backends/gloo/gloo_reduce.h"

namespace kiln::distributed::gloo_backend {

// The slot prefix of its messages (gloo's collectives use 0x01 to 0x08, the
// ring reduce-scatter 0x40).
inline constexpr uint8_t kRecursiveDoublingSlotPrefix = 0x41;

// The largest all-reduce that goes by recursive doubling (measured with
// build/bench/allreduce, docs/BENCHMARKS.md).
inline constexpr size_t kRecursiveDoublingMaxBytes = size_t{4} << 20;

// True if an all-reduce of `bytes` over `world_size` ranks should use
// recursive_doubling_all_reduce.
bool use_recursive_doubling(size_t bytes, int world_size);

// data: (elements) of `element_size` bytes, reduced in place over all ranks
// with `reduce`. The world size must be a power of two. `tag` must be the
// same on every rank and unique among the collectives in flight; the whole
// exchange must finish within `timeout`, else gloo::IoException is thrown.
void recursive_doubling_all_reduce(const std::shared_ptr<::gloo::Context>& context, void* data, size_t elements,
                                   size_t element_size, const ReduceFunction& reduce, uint32_t tag,
                                   std::chrono::milliseconds timeout);

}  // namespace kiln::distributed::gloo_backend
