// Reduce-scatter for Gloo: a ring over unbound buffers.
//
// Note [Gloo reduce-scatter]
// Gloo's option-based API (gloo::allreduce, gloo::allgather, ...) has no
// reduce-scatter; its only one is the old ReduceScatterHalvingDoubling
// class, which needs pairs and slots of its own and takes a separate count
// per rank. The alternative, an all-reduce of the whole input followed by a
// copy of this rank's chunk, sends twice the data a reduce-scatter needs
// ((P-1)/P of the input per rank for the reduce-scatter, 2(P-1)/P for the
// all-reduce) and reduces every chunk on every rank. FSDP reduce-scatters
// every gradient of the model each step, so that factor of two is its
// gradient traffic. Hence a ring here, the first half of a ring all-reduce:
//
//   input on each rank: P chunks of n elements; chunk c ends reduced on rank c.
//   step s = 0 .. P-2: rank r sends chunk (r-1-s) mod P, as far as it has
//   reduced it, to rank r+1, and receives chunk (r-2-s) mod P from rank r-1,
//   which it reduces with its own copy of that chunk.
//
// Chunk c starts at rank c+1 and travels c+1 -> c+2 -> ... -> c, picking up
// each rank's contribution, so after P-1 steps rank r holds chunk r reduced
// over all P ranks. Each step moves one chunk each way; the sends and
// receives of a step run at the same time, and the reduction of step s is
// done before step s+1 sends its result (no segmenting within a chunk, which
// gloo's own ring all-reduce does to overlap reduction with transfer; worth
// it only for large chunks, and measurable first).
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "distributed/backends/gloo/gloo_reduce.h"

namespace kiln::distributed::gloo_backend {

// The slot prefix of the ring's messages: gloo's own collectives use 0x01 to
// 0x08 (gloo/types.h), point-to-point messages kPointToPointSlotPrefix.
inline constexpr uint8_t kReduceScatterSlotPrefix = 0x40;

// input: (P * chunk_elements) elements of `element_size` bytes, read only.
// output: (chunk_elements) elements; receives chunk rank() reduced over all
// ranks with `reduce`. `tag` must be the same on every rank and unique among
// the collectives in flight; the whole ring must finish within `timeout`,
// else gloo::IoException is thrown (and the context is unusable).
void ring_reduce_scatter(const std::shared_ptr<::gloo::Context>& context, const void* input, void* output,
                         size_t chunk_elements, size_t element_size, const ReduceFunction& reduce, uint32_t tag,
                         std::chrono::milliseconds timeout);

}  // namespace kiln::distributed::gloo_backend
