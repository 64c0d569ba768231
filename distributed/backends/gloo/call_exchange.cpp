#include "distributed/backends/gloo/call_exchange.h"

#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>

#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::distributed::gloo_backend {

namespace {

constexpr size_t kCallBytes = sizeof(CollectiveCall::Words);

// A header: the rest this rank posted in the step (one word, 0 for none),
// then the `count` calls it knows (Note [Calls in the first message]).
size_t header_bytes(int count) { return sizeof(uint64_t) + static_cast<size_t>(count) * kCallBytes; }

// Gloo's slot layout is a prefix byte over a 32-bit tag; the 24 bits between
// carry a rest's exact length, so that rests of different lengths never meet.
uint64_t slot(uint8_t prefix, size_t rest, uint32_t tag) {
  return (uint64_t{prefix} << 56) | (static_cast<uint64_t>(rest) << 32) | tag;
}

bool is_known(const CollectiveCall::Words& words) { return words[1] != 0; }

}  // namespace

CallExchange::CallExchange(std::shared_ptr<::gloo::Context> context, const CollectiveCall& call, uint32_t tag,
                           std::chrono::milliseconds timeout, std::string group,
                           std::function<void(int rank, const CollectiveCall& call)> received, bool check_calls)
    : context_(std::move(context)),
      call_(call),
      tag_(tag),
      deadline_(std::chrono::steady_clock::now() + timeout),
      group_(std::move(group)),
      received_(std::move(received)),
      table_(static_cast<size_t>(context_->size)),
      check_calls_(check_calls) {
  table_[static_cast<size_t>(context_->rank)] = call.encode();
}

bool CallExchange::by_doubling(int world_size) { return world_size > 1 && (world_size & (world_size - 1)) == 0; }

std::chrono::milliseconds CallExchange::remaining() const {
  return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                    deadline_ - std::chrono::steady_clock::now()));
}

bool CallExchange::known_calls_agree() const {
  const CollectiveCall::Words* first = nullptr;
  for (const auto& words : table_) {
    if (!is_known(words)) continue;
    if (first == nullptr) {
      first = &words;
    } else if (words != *first) {
      return false;
    }
  }
  return true;
}

CallExchange::KnownRanks CallExchange::known_before(int rank, int distance) const {
  const int size = context_->size;
  // Recursive doubling: the aligned block of `distance` ranks holding rank.
  if (by_doubling(size)) return {rank & ~(distance - 1), distance, +1};
  // Bruck's: rank and the ranks before it, as many as there are.
  return {rank, std::min(distance, size), -1};
}

void CallExchange::learn(const uint64_t* header, const KnownRanks& ranks) {
  const uint64_t* calls = header + 1;
  for (int i = 0; i < ranks.count; ++i) {
    const size_t r = static_cast<size_t>(ranks.at(i, context_->size));
    if (is_known(table_[r])) continue;
    CollectiveCall::Words words;
    std::memcpy(words.data(), calls + static_cast<size_t>(i) * CollectiveCall::kWords, kCallBytes);
    if (!is_known(words)) continue;
    table_[r] = words;
    if (received_) received_(static_cast<int>(r), CollectiveCall::decode(words));
  }
}

const uint8_t* CallExchange::step(int distance, const void* send, size_t bytes) {
  const int partner = context_->rank ^ distance;
  if (!check_calls_) return data_step(partner, send, bytes);
  return exchange_step(distance, partner, partner, send, bytes);
}

const uint8_t* CallExchange::data_step(int partner, const void* send, size_t bytes) {
  if (!incoming_.defined() || static_cast<size_t>(incoming_.nbytes()) < bytes) {
    incoming_ = empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DType::UInt8);
  }
  auto* in = static_cast<uint8_t*>(incoming_.data_ptr());
  if (bytes == 0) return in;
  const uint64_t data_slot = slot(kCallSlotPrefix, 0, tag_);
  auto receive = context_->createUnboundBuffer(in, bytes);
  // Gloo's buffers take a mutable pointer; this one is only sent from.
  auto sending = context_->createUnboundBuffer(const_cast<void*>(send), bytes);
  receive->recv(partner, data_slot);
  sending->send(partner, data_slot);
  KILN_CHECK(receive->waitRecv(remaining()), "gloo ", call_.describe(), " #", call_.sequence,
             ": aborted while receiving from rank ", partner);
  KILN_CHECK(sending->waitSend(remaining()), "gloo ", call_.describe(), " #", call_.sequence,
             ": aborted while sending to rank ", partner);
  return in;
}

const uint8_t* CallExchange::exchange_step(int distance, int send_to, int receive_from, const void* send,
                                           size_t bytes) {
  const int rank = context_->rank;
  KILN_CHECK(bytes == 0 || send_to == receive_from, "gloo ", call_.describe(),
             ": a step that moves data needs one partner (Note [Calls in the first message])");
  // Both partners know as many calls before a step, so their headers are
  // of one length.
  const KnownRanks mine = known_before(rank, distance);
  const KnownRanks theirs = known_before(receive_from, distance);
  const size_t header = header_bytes(mine.count);
  // A rank that knows of a disagreement moves no more data, only what it knows.
  const bool with_data = known_calls_agree();
  // Data that fits rides in the first message; more goes whole as the rest,
  // after a first message of the header alone (Note [Calls in the first message]).
  const bool fits = bytes <= kFirstMessageData;
  const size_t first = with_data && fits ? bytes : 0;
  const size_t rest = with_data && !fits ? bytes : 0;
  KILN_CHECK(rest < (size_t{1} << 24), "gloo ", call_.describe(), ": a step's rest of ", rest,
             " bytes does not fit its slot (Note [Calls in the first message])");

  // incoming_: the first message's receive, then the rest's.
  const size_t incoming_bytes = header + kFirstMessageData + rest;
  if (!incoming_.defined() || static_cast<size_t>(incoming_.nbytes()) < incoming_bytes) {
    incoming_ = empty({static_cast<int64_t>(incoming_bytes)}, DType::UInt8);
  }
  if (!outgoing_.defined() || static_cast<size_t>(outgoing_.nbytes()) < header + first) {
    outgoing_ = empty({static_cast<int64_t>(header + first)}, DType::UInt8);
  }
  auto* out = static_cast<uint8_t*>(outgoing_.data_ptr());
  auto* in = static_cast<uint8_t*>(incoming_.data_ptr());
  uint8_t* rest_into = in + header + kFirstMessageData;

  const uint64_t first_slot = slot(kCallSlotPrefix, 0, tag_);
  const uint64_t rest_slot = slot(kRestSlotPrefix, rest, tag_);
  auto first_in = context_->createUnboundBuffer(in, header + kFirstMessageData);
  auto first_out = context_->createUnboundBuffer(out, header + first);
  std::unique_ptr<::gloo::transport::UnboundBuffer> rest_in, rest_out;
  // Receives are posted before sends, so that no message waits for its
  // receiver to get round to posting, and before the first message is
  // built: Gloo sends nothing until the receiver says its receive is
  // posted, and that word then travels while this rank copies its data.
  first_in->recv(receive_from, first_slot);
  if (rest > 0) {
    rest_in = context_->createUnboundBuffer(rest_into, rest);
    rest_in->recv(receive_from, rest_slot);
  }
  const uint64_t posted_rest = rest;
  std::memcpy(out, &posted_rest, sizeof(posted_rest));
  for (int i = 0; i < mine.count; ++i) {
    const size_t r = static_cast<size_t>(mine.at(i, context_->size));
    std::memcpy(out + sizeof(posted_rest) + static_cast<size_t>(i) * kCallBytes, table_[r].data(), kCallBytes);
  }
  if (first > 0) std::memcpy(out + header, send, first);
  first_out->send(send_to, first_slot);
  if (rest > 0) {
    // Gloo's buffers take a mutable pointer; this one is only sent from.
    rest_out = context_->createUnboundBuffer(const_cast<void*>(send), rest);
    rest_out->send(send_to, rest_slot);
  }

  KILN_CHECK(first_in->waitRecv(remaining()), "gloo ", call_.describe(), " #", call_.sequence,
             ": aborted while exchanging calls with rank ", receive_from);
  uint64_t partner_rest = 0;
  std::memcpy(&partner_rest, in, sizeof(partner_rest));
  learn(reinterpret_cast<const uint64_t*>(in), theirs);
  // Rests of equal length meet and must be waited for; others never meet,
  // and are left to Gloo's pending lists with nothing to receive them.
  if (rest > 0 && partner_rest == rest) {
    KILN_CHECK(rest_in->waitRecv(remaining()), "gloo ", call_.describe(), " #", call_.sequence,
               ": aborted while receiving from rank ", receive_from);
    KILN_CHECK(rest_out->waitSend(remaining()), "gloo ", call_.describe(), " #", call_.sequence,
               ": aborted while sending to rank ", send_to);
  }
  KILN_CHECK(first_out->waitSend(remaining()), "gloo ", call_.describe(), " #", call_.sequence,
             ": aborted while exchanging calls with rank ", send_to);
  if (!known_calls_agree()) return nullptr;
  // Agreeing calls give equal lengths, so the rests met.
  KILN_CHECK(rest == partner_rest, "gloo ", call_.describe(), ": rank ", receive_from, " agreed on the call but posted ",
             partner_rest, " bytes after its first message where rank ", rank, " posted ", rest);
  return rest > 0 ? rest_into : in + header;
}

void CallExchange::exchange_calls() {
  if (!check_calls_) return;
  const int size = context_->size;
  const int rank = context_->rank;
  for (int distance = 1; distance < size; distance *= 2) {
    if (by_doubling(size)) {
      step(distance, nullptr, 0);
    } else {
      // Bruck's pattern: what rank r knows after step k is the calls of
      // ranks r, r-1, ..., r-2^(k+1)+1, so again every call after the last.
      exchange_step(distance, (rank + distance) % size, (rank - distance + size) % size, nullptr, 0);
    }
  }
  finish();
}

void CallExchange::finish() const {
  if (!check_calls_) return;
  std::vector<CollectiveCall> calls(table_.size());
  for (size_t r = 0; r < table_.size(); ++r) {
    KILN_CHECK(is_known(table_[r]), "gloo ", call_.describe(), " #", call_.sequence, ": rank ", context_->rank,
               " never learnt rank ", r, "'s call (Note [Calls in the first message])");
    calls[r] = CollectiveCall::decode(table_[r]);
  }
  check_calls_agree(calls, context_->rank, group_);
}

}  // namespace kiln::distributed::gloo_backend
