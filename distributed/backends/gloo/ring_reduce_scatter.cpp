#include "distributed/backends/gloo/ring_reduce_scatter.h"

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>

#include "tensor/factory.h"

namespace kiln::distributed::gloo_backend {

void ring_reduce_scatter(const std::shared_ptr<::gloo::Context>& context, const void* input, void* output,
                         size_t chunk_elements, size_t element_size, const ReduceFunction& reduce, uint32_t tag,
                         std::chrono::milliseconds timeout) {
  const int size = context->size;
  const int rank = context->rank;
  const size_t bytes = chunk_elements * element_size;
  const auto* in_bytes = static_cast<const uint8_t*>(input);
  if (size == 1) {
    std::memcpy(output, input, bytes);
    return;
  }
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const uint64_t slot = ::gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  auto chunk_offset = [&](int c) { return static_cast<size_t>(((c % size) + size) % size) * bytes; };

  // Gloo's buffers take a mutable pointer; the input is only ever sent from.
  auto in = context->createUnboundBuffer(const_cast<void*>(input), static_cast<size_t>(size) * bytes);
  // scratch: (2, chunk_elements): step s receives into half (s+1)%2 while
  // sending the half the previous step reduced into. A Kiln tensor rather
  // than a std::vector: no zero fill, and the CPU allocator's cache hands the
  // same pages back to the next call instead of faulting in new ones.
  Tensor scratch = empty({static_cast<int64_t>(2 * bytes)}, DType::UInt8);
  auto halves = context->createUnboundBuffer(scratch.data_ptr(), 2 * bytes);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
  };

  for (int step = 0; step + 1 < size; ++step) {
    const size_t receive_half = static_cast<size_t>((step + 1) % 2) * bytes;
    const size_t send_half = static_cast<size_t>(step % 2) * bytes;
    // Posting the receive first lets the left neighbour's send go out at once.
    halves->recv(left, slot, receive_half, bytes);
    auto& sender = step == 0 ? in : halves;
    sender->send(right, slot, step == 0 ? chunk_offset(rank - 1) : send_half, bytes);
    halves->waitRecv(remaining());

    // The received partial sum of chunk (rank-2-step) plus this rank's own
    // copy of it; at the last step that chunk is `rank` and the sum is final.
    uint8_t* partial = scratch.data<uint8_t>() + receive_half;
    const bool last = step + 2 == size;
    reduce(last ? output : partial, partial, in_bytes + chunk_offset(rank - 2 - step), chunk_elements);
    // The next step receives into the half this one sent from.
    sender->waitSend(remaining());
  }
}

}  // namespace kiln::distributed::gloo_backend
