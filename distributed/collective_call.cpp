#include "distributed/collective_call.h"

#include <sstream>

#include "distributed/process_group.h"
#include "tensor/error.h"

namespace kiln::distributed {

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Reduce: return "reduce";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Gather: return "gather";
    case CollectiveKind::Scatter: return "scatter";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::Barrier: return "barrier";
    case CollectiveKind::Send: return "send";
  }
  return "unknown collective";
}

CollectiveCall CollectiveCall::make(uint64_t sequence, CollectiveKind kind, DType dtype, uint64_t elements,
                                    int root) {
  CollectiveCall call;
  call.sequence = sequence;
  call.kind = kind;
  call.dtype = static_cast<int32_t>(dtype);
  call.elements = elements;
  call.root = root;
  return call;
}

CollectiveCall CollectiveCall::make_reduction(uint64_t sequence, CollectiveKind kind, DType dtype,
                                              uint64_t elements, ReduceOp op, int root) {
  CollectiveCall call = make(sequence, kind, dtype, elements, root);
  call.reduce_op = static_cast<int32_t>(op);
  return call;
}

std::string CollectiveCall::describe() const {
  std::ostringstream os;
  os << collective_kind_name(kind) << '(';
  if (kind != CollectiveKind::Barrier) os << describe_payload();
  if (reduce_op >= 0) os << ", " << reduce_op_name(static_cast<ReduceOp>(reduce_op));
  if (root >= 0) os << ", root " << root;
  os << ')';
  return os.str();
}

std::string CollectiveCall::describe_payload() const {
  std::ostringstream os;
  if (dtype >= 0 && dtype <= static_cast<int32_t>(DType::Float64)) {
    os << dtype_name(static_cast<DType>(dtype));
  } else {
    os << "dtype " << dtype;
  }
  os << ", " << elements << (elements == 1 ? " element" : " elements");
  return os.str();
}

CollectiveCall::Words CollectiveCall::encode() const {
  auto word = [](int32_t v) { return static_cast<uint64_t>(static_cast<uint32_t>(v)); };
  return {sequence, static_cast<uint64_t>(kind), word(reduce_op), word(dtype), word(root), elements};
}

CollectiveCall CollectiveCall::decode(const Words& words) {
  auto value = [](uint64_t w) { return static_cast<int32_t>(static_cast<uint32_t>(w)); };
  CollectiveCall call;
  call.sequence = words[0];
  call.kind = static_cast<CollectiveKind>(words[1]);
  call.reduce_op = value(words[2]);
  call.dtype = value(words[3]);
  call.root = value(words[4]);
  call.elements = words[5];
  return call;
}

void check_calls_agree(const std::vector<CollectiveCall>& calls, int me, const std::string& group) {
  for (size_t r = 1; r < calls.size(); ++r) {
    if (calls[r] == calls[0]) continue;
    std::ostringstream os;
    // Sequence numbers differ only if a rank skipped a collective that
    // failed to start; then they are the news.
    auto call = [&](size_t k) {
      return calls[k].describe() + (calls[k].sequence != calls[me].sequence
                                        ? " as its #" + std::to_string(calls[k].sequence)
                                        : std::string());
    };
    os << "the ranks of group '" << group << "' disagree on collective #" << calls[me].sequence << ": rank 0 calls "
       << call(0) << " but rank " << r << " calls " << call(r) << ". Every rank's call:";
    for (size_t k = 0; k < calls.size(); ++k) os << (k ? "; " : " ") << "rank " << k << ' ' << call(k);
    os << '.';
    os << " (Note [Always-on collective agreement])";
    KILN_FAIL(os.str());
  }
}

}  // namespace kiln::distributed
