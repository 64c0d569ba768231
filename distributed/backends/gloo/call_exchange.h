// The TCP form of Note [Always-on collective agreement]: a fixed-size
// preamble that every rank sends to every other before a collective's data.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "distributed/collective_call.h"

namespace kiln::distributed::gloo_backend {

// The slot prefix of the preambles: gloo's own collectives use 0x01 to 0x08,
// kReduceScatterSlotPrefix 0x40, kPointToPointSlotPrefix 0x50 and 0x51.
inline constexpr uint8_t kCallSlotPrefix = 0x60;

// Sends `call` to every other rank and receives theirs (CollectiveCall::kWords
// words each, whatever the call), then throws kiln::Error naming the first
// rank that differs, the same on every rank, unless all agree. `tag` is the
// collective's tag; the whole exchange must finish within `timeout`.
// `received(r, call)` is called as each peer's call arrives.
void agree_over_tcp(const std::shared_ptr<::gloo::Context>& context, const CollectiveCall& call, uint32_t tag,
                    std::chrono::milliseconds timeout, const std::string& group,
                    const std::function<void(int rank, const CollectiveCall& call)>& received);

}  // namespace kiln::distributed::gloo_backend
