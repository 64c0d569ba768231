#include "distributed/backends/gloo/call_exchange.h"

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <vector>

#include "tensor/error.h"

namespace kiln::distributed::gloo_backend {

void agree_over_tcp(const std::shared_ptr<::gloo::Context>& context, const CollectiveCall& call, uint32_t tag,
                    std::chrono::milliseconds timeout, const std::string& group,
                    const std::function<void(int rank, const CollectiveCall& call)>& received) {
  const int size = context->size;
  const int rank = context->rank;
  constexpr size_t kBytes = sizeof(CollectiveCall::Words);
  const uint64_t slot = ::gloo::Slot::build(kCallSlotPrefix, tag);
  // words: (size) calls, rank r's at r; this rank's is sent from its own place.
  std::vector<CollectiveCall::Words> words(size);
  words[rank] = call.encode();
  auto buffer = context->createUnboundBuffer(words.data(), words.size() * kBytes);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      deadline - std::chrono::steady_clock::now()));
  };
  // Every receive is posted before any send, so that no preamble waits for
  // its receiver to get round to posting.
  for (int r = 0; r < size; ++r) {
    if (r != rank) buffer->recv(r, slot, r * kBytes, kBytes);
  }
  for (int r = 0; r < size; ++r) {
    if (r != rank) buffer->send(r, slot, rank * kBytes, kBytes);
  }
  for (int i = 0; i < size - 1; ++i) {
    int source = -1;
    KILN_CHECK(buffer->waitRecv(&source, remaining()), "gloo ", call.describe(), " #", call.sequence,
               ": aborted while exchanging calls");
    if (source >= 0 && source < size) received(source, CollectiveCall::decode(words[source]));
  }
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    KILN_CHECK(buffer->waitSend(remaining()), "gloo ", call.describe(), " #", call.sequence,
               ": aborted while exchanging calls");
  }
  std::vector<CollectiveCall> calls(size);
  for (int r = 0; r < size; ++r) calls[r] = CollectiveCall::decode(words[r]);
  check_calls_agree(calls, rank, group);
}

}  // namespace kiln::distributed::gloo_backend
