#include "distributed/backends/gloo/recursive_doubling.h"

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>

#include "tensor/factory.h"

namespace kiln::distributed::gloo_backend {

bool use_recursive_doubling(size_t bytes, int world_size) {
  const bool power_of_two = world_size > 1 && (world_size & (world_size - 1)) == 0;
  return power_of_two && bytes <= kRecursiveDoublingMaxBytes;
}

void recursive_doubling_all_reduce(const std::shared_ptr<::gloo::Context>& context, void* data, size_t elements,
                                   size_t element_size, const ReduceFunction& reduce, uint32_t tag,
                                   std::chrono::milliseconds timeout) {
  const int size = context->size;
  const int rank = context->rank;
  const size_t bytes = elements * element_size;
  const uint64_t slot = ::gloo::Slot::build(kRecursiveDoublingSlotPrefix, tag);
  // received: (elements) the partner's partial reduction of this step. A
  // Kiln tensor: the CPU allocator's cache hands the same pages back next
  // call instead of faulting in new ones.
  Tensor received = empty({static_cast<int64_t>(bytes)}, DType::UInt8);
  auto mine = context->createUnboundBuffer(data, bytes);
  auto theirs = context->createUnboundBuffer(received.data_ptr(), bytes);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
  };
  for (int distance = 1; distance < size; distance *= 2) {
    const int partner = rank ^ distance;
    // Posting the receive first lets the partner's send go out at once.
    theirs->recv(partner, slot);
    mine->send(partner, slot);
    theirs->waitRecv(remaining());
    // The send must be out of `data` before it is overwritten.
    mine->waitSend(remaining());
    reduce(data, data, received.data_ptr(), elements);
  }
}

}  // namespace kiln::distributed::gloo_backend
