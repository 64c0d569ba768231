// The TCP form of Note [Always-on collective agreement]: every rank's call
// travels in the first message each pair of ranks exchanges.
//
// Note [Calls in the first message]
// Over TCP a collective's call (CollectiveCall, 48 bytes) cannot simply be
// prefixed to the data: the receiver posts its receive for the bytes it
// expects, and a longer message makes Gloo throw on its event-loop thread
// (std::terminate). An exchange of calls before the data is safe, but it is
// one more round of messages, which cost an all-reduce of up to 1 MB 1.4x
// to 1.8x its time. So the calls ride in the data's own messages, and no
// message is ever longer than the receive it meets:
//
// - The exchange runs in steps: for a power-of-two world size those of
//   recursive doubling (step k pairs rank r with r XOR 2^k), else Bruck's
//   (in step k rank r sends to r+2^k and receives from r-2^k, modulo the
//   world size). In each step every rank sends a *first message*: a header,
//   then whatever the step moves if that is at most kFirstMessageData bytes
//   (nothing for a plain exchange of calls). Every rank posts the first
//   message's receive for the header plus kFirstMessageData bytes, the most
//   any rank sends in one, so a first message of any rank fits whatever its
//   call.
// - The header holds the calls this rank knows so far: its own, and those
//   its earlier partners told it. Either pattern doubles what each rank
//   knows per step (recursive doubling as it doubles the ranks reduced into
//   each result), so after the last step every rank knows every call, and
//   every rank decides the same way (check_calls_agree on the full table):
//   the error names each rank's call and the first rank that differs, on
//   every rank.
// - Which ranks a rank knows before step k follows from the pattern alone
//   (recursive doubling: the aligned block of 2^k ranks holding it; Bruck's:
//   it and the 2^k - 1 ranks before it), so the header lists just those
//   calls, in an order the receiver derives too: 8 + 2^k x 48 bytes, 56 for
//   2 ranks. Both partners know as many calls, so their headers are of one
//   length. Short matters: over loopback TCP (bench/gloo_messages) a
//   message's time moves in steps with its length, and 4 KB of data with
//   the whole table of 2 ranks (104 bytes) cost 4% more than the data alone,
//   where with 48 bytes more it cost nothing measurable.
// - A step that moves more than kFirstMessageData bytes sends its header
//   alone as the first message and all of its data as a second message,
//   posted at the same time, on a slot that encodes its exact length (below 2^24:
//   only recursive doubling sends one, up to kRecursiveDoublingMaxBytes). A
//   rest of another length lands on another slot, where nothing receives it,
//   so it can never overflow a receive either. The header also says what
//   rest its sender posted: when the two partners' rests differ (their calls
//   differ), both leave their rests unmatched and abandoned; when they are
//   equal, both wait for them, so no message is left half read in a pair.
// - A rank that learns of a disagreement stops moving data: its remaining
//   steps send headers only, so its later partners learn of it too.
//
// Why the data is not split between the two messages: timed in one process
// pair against a single message (bench/gloo_messages), a first message
// filled to kFirstMessageData and the rest after it cost 16-38% of a 512 KB
// exchange and up to 9% of a 4 MB one, and a header alone followed by the
// whole data cost about as much as the noise (docs/BENCHMARKS.md, "TCP, the
// shape of the messages above 256 KiB").
//
// So an all-reduce by recursive doubling (Note [Gloo all-reduce
// algorithms]) carries the check at the cost of copying up to
// kFirstMessageData bytes per step into the first message, or of one more
// message of a few hundred bytes above that (measured in docs/BENCHMARKS.md,
// "Always-on collective agreement"), and every other
// collective over TCP exchanges headers alone before its data, in the same
// steps, so that ranks making different collectives still meet. The ring
// all-reduce (large buffers, or world sizes that are not a power of two)
// is Gloo's own and cannot carry a header: it exchanges calls first, which
// is a small part of a transfer that large.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/collective_call.h"
#include "tensor/tensor.h"

namespace kiln::distributed::gloo_backend {

// The slot prefixes of the exchange: gloo's own collectives use 0x01 to
// 0x08, kReduceScatterSlotPrefix 0x40, kPointToPointSlotPrefix 0x50 and 0x51.
inline constexpr uint8_t kCallSlotPrefix = 0x60;  // first messages
inline constexpr uint8_t kRestSlotPrefix = 0x61;  // a step's data after the first message

// The most data bytes a first message carries after its header (measured:
// docs/BENCHMARKS.md, "Always-on collective agreement").
inline constexpr size_t kFirstMessageData = size_t{256} << 10;

// One collective's exchange of calls (Note [Calls in the first message]),
// run on the communication thread.
class CallExchange {
 public:
  // `received(r, call)` is called as rank r's call becomes known. The whole
  // exchange must finish within `timeout`. Without `check_calls` (a group
  // made with ProcessGroupOptions::agreement_check off, only to measure what
  // the check costs) the steps move the data alone and nothing is checked.
  CallExchange(std::shared_ptr<::gloo::Context> context, const CollectiveCall& call, uint32_t tag,
               std::chrono::milliseconds timeout, std::string group,
               std::function<void(int rank, const CollectiveCall& call)> received, bool check_calls);

  // True if the exchange goes by recursive doubling's steps (a power-of-two
  // world size), which recursive_doubling_all_reduce shares.
  static bool by_doubling(int world_size);

  // One step of recursive doubling, with rank ^ distance: sends `bytes`
  // from `send` and returns the partner's `bytes`, valid until the next
  // step, or nullptr once a disagreement is known (the partner's data is
  // then not all here, and finish() throws).
  const uint8_t* step(int distance, const void* send, size_t bytes);

  // Exchanges calls alone, in every step, then finish(): what a collective
  // other than recursive doubling does before its data moves.
  void exchange_calls();

  // Throws kiln::Error, the same on every rank, unless every rank's call is
  // known and they all agree.
  void finish() const;

  // Milliseconds left of the timeout.
  std::chrono::milliseconds remaining() const;
  int world_size() const { return context_->size; }

 private:
  // The ranks whose calls a rank knows before the step of `distance`, in
  // the order its header lists them: first, first + step, ... (modulo the
  // world size), `count` of them.
  struct KnownRanks {
    int first, count, step;
    int at(int i, int size) const { return ((first + i * step) % size + size) % size; }
  };
  KnownRanks known_before(int rank, int distance) const;
  // The calls known so far agree with each other.
  bool known_calls_agree() const;
  // Takes the calls of a header listing `ranks` into table_.
  void learn(const uint64_t* header, const KnownRanks& ranks);
  // The step of `distance`: the first message goes to `send_to` and comes
  // from `receive_from`; data (bytes > 0) only when the two are one partner.
  const uint8_t* exchange_step(int distance, int send_to, int receive_from, const void* send, size_t bytes);
  // One step without calls: the data alone, in one message each way.
  const uint8_t* data_step(int partner, const void* send, size_t bytes);

  std::shared_ptr<::gloo::Context> context_;
  CollectiveCall call_;
  uint32_t tag_;
  std::chrono::steady_clock::time_point deadline_;
  std::string group_;
  std::function<void(int, const CollectiveCall&)> received_;
  // table_[r] is rank r's call encoded, or all zeros while unknown (no
  // CollectiveKind is 0).
  std::vector<CollectiveCall::Words> table_;
  bool check_calls_;
  // The step's outgoing first message, and where the partner's messages
  // land: its header, then its data (bytes long, the rest after the first
  // message's part).
  Tensor outgoing_;
  Tensor incoming_;
};

}  // namespace kiln::distributed::gloo_backend
