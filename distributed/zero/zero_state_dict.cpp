// ZeroRedundancyOptimizer's state dict: the ranks' optimizer states
// consolidated into one rank as a whole optimizer's dict, and a whole dict
// loaded by every rank for its own parameters (Note [Optimizer state dict]).
#include <algorithm>
#include <charconv>
#include <map>
#include <sstream>

#include "distributed/zero/zero_redundancy_optimizer.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::distributed {

namespace {

// Point-to-point messages of consolidate_state_dict() carry this tag, apart
// from anyone else's sends on the group.
constexpr int kConsolidateTag = 2207;

// One state tensor of one parameter, as a rank sends it.
struct StateItem {
  size_t param = 0;  // the global parameter index
  std::string name;  // "exp_avg", "step", ...
  Tensor value;
};

// "param name dtype ndim size...\n" per item: what the receiver needs to
// make the tensors it receives next.
std::string describe_items(const std::vector<StateItem>& items) {
  std::ostringstream out;
  for (const StateItem& item : items) {
    out << item.param << ' ' << item.name << ' ' << static_cast<int>(item.value.dtype()) << ' ' << item.value.dim();
    for (int64_t s : item.value.shape()) out << ' ' << s;
    out << '\n';
  }
  return out.str();
}

std::vector<StateItem> parse_items(const std::string& text, int from_rank) {
  std::vector<StateItem> items;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    StateItem item;
    int dtype = 0;
    int64_t ndim = 0;
    fields >> item.param >> item.name >> dtype >> ndim;
    Shape shape(static_cast<size_t>(std::max<int64_t>(ndim, 0)));
    for (int64_t& s : shape) fields >> s;
    KILN_CHECK(!fields.fail() && dtype >= 0 && dtype < kNumDTypes,
               "ZeroRedundancyOptimizer::consolidate_state_dict: rank ", from_rank,
               " sent a malformed state description: '", line, "'");
    item.value = empty(shape, static_cast<DType>(dtype));
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace

void ZeroRedundancyOptimizer::consolidate_state_dict(int to_rank) {
  const std::string op = "ZeroRedundancyOptimizer::consolidate_state_dict";
  KILN_CHECK(to_rank >= 0 && to_rank < group_->size(), op, ": to_rank ", to_rank, " is outside group '", group_->name(),
             "' of size ", group_->size());
  KILN_CHECK(!in_backward_, op, ": a backward is still reducing gradients");
  consolidated_.reset();
  consolidated_to_ = to_rank;
  const int rank = group_->rank();
  const Device where = group_->collective_device();

  std::vector<StateItem> mine;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!owns(i)) continue;
    for (const auto& [name, value] : local_->state(params_[i])) mine.push_back({i, name, value});
  }
  if (rank != to_rank) {
    // The description's length, the description, then each tensor.
    const std::string text = describe_items(mine);
    group_->send(full({1}, static_cast<double>(text.size()), {DType::Int64, where}), to_rank, kConsolidateTag);
    if (!text.empty()) {
      group_->send(from_vector<uint8_t>(std::vector<uint8_t>(text.begin(), text.end()),
                                        {static_cast<int64_t>(text.size())}, where),
                   to_rank, kConsolidateTag);
    }
    for (const StateItem& item : mine) group_->send(item.value.to(where), to_rank, kConsolidateTag);
    return;
  }

  // parameter -> its state entries, in the order its owner holds them.
  std::map<size_t, std::vector<StateItem>> state;
  for (int r = 0; r < group_->size(); ++r) {
    if (r == rank) {
      // Copies: the dict is a snapshot, and the next step changes the state.
      for (const StateItem& item : mine) state[item.param].push_back({item.param, item.name, item.value.clone()});
      continue;
    }
    Tensor length = empty({1}, {DType::Int64, where});
    group_->recv(length, r, kConsolidateTag);
    const int64_t n = length.cpu().at<int64_t>({0});
    if (n == 0) continue;
    Tensor bytes = empty({n}, {DType::UInt8, where});
    group_->recv(bytes, r, kConsolidateTag);
    bytes = bytes.cpu();
    const std::string text(reinterpret_cast<const char*>(bytes.data<uint8_t>()), static_cast<size_t>(n));
    for (StateItem& item : parse_items(text, r)) {
      KILN_CHECK(item.param < params_.size() && owner_[item.param] == r, op, ": rank ", r, " sent state for parameter ",
                 item.param, ", which it does not own");
      item.value = item.value.to(where);
      group_->recv(item.value, r, kConsolidateTag);
      state[item.param].push_back(std::move(item));
    }
  }

  // As Optimizer::state_dict() of one optimizer over every parameter: the
  // state first, then each group's parameter ids and hyperparameters (the
  // same on every rank: the local optimizer's).
  TensorDict dict;
  for (const auto& [param, items] : state) {
    for (const StateItem& item : items) dict.insert("state." + std::to_string(param) + "." + item.name, item.value);
  }
  const TensorDict local = local_->state_dict();
  int64_t next = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids;
    for (size_t j = 0; j < groups_[g].params.size(); ++j) ids.push_back(next++);
    dict.insert(prefix + "params", from_vector<int64_t>(ids, {static_cast<int64_t>(ids.size())}));
    for (const auto& [key, value] : local) {
      if (key.compare(0, prefix.size(), prefix) == 0 && key != prefix + "params") dict.insert(key, value);
    }
  }
  consolidated_ = std::move(dict);
}

const TensorDict& ZeroRedundancyOptimizer::state_dict() const {
  const std::string op = "ZeroRedundancyOptimizer::state_dict";
  KILN_CHECK(consolidated_to_ >= 0, op, ": nothing was consolidated since the last step or load; call ",
             "consolidate_state_dict(to_rank) on every rank first, then state_dict() on to_rank");
  KILN_CHECK(consolidated_to_ == group_->rank(), op, ": the state dict was consolidated to rank ", consolidated_to_,
             ", not to this rank ", group_->rank());
  return *consolidated_;
}

void ZeroRedundancyOptimizer::load_state_dict(const TensorDict& dict) {
  const std::string op = "ZeroRedundancyOptimizer::load_state_dict";
  KILN_CHECK(!in_backward_, op, ": a backward is still reducing gradients");
  consolidated_.reset();
  consolidated_to_ = -1;
  const int rank = group_->rank();

  // This rank's part, in its local optimizer's numbering.
  auto localize = [&] {
    optim::StateDictEntries entries = optim::split_state_dict(dict, op);
    auto& group_keys = entries.groups;
    auto& state_keys = entries.state;
    KILN_CHECK(group_keys.size() == groups_.size() &&
                   (groups_.empty() || group_keys.rbegin()->first == static_cast<int64_t>(groups_.size()) - 1),
               op, ": the state dict has ", group_keys.size(), " param groups but the optimizer has ", groups_.size());
    TensorDict local;
    std::map<int64_t, size_t> param_of_id;  // saved parameter id -> global index
    size_t first = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const std::string prefix = "param_groups." + std::to_string(g) + ".";
      auto& entries = group_keys[static_cast<int64_t>(g)];
      auto ids_it = entries.find("params");
      KILN_CHECK(ids_it != entries.end(), op, ": missing key '", prefix, "params'");
      const Tensor ids = ids_it->second.to(DType::Int64).cpu().contiguous();
      KILN_CHECK(ids.dim() == 1 && ids.numel() == static_cast<int64_t>(groups_[g].params.size()), op, ": '", prefix,
                 "params' has shape ", ids.shape(), " but group ", g, " has ", groups_[g].params.size(), " parameters");
      std::vector<int64_t> local_ids;
      for (int64_t j = 0; j < ids.numel(); ++j) {
        const size_t i = first + static_cast<size_t>(j);
        KILN_CHECK(param_of_id.emplace(ids.data<int64_t>()[j], i).second, op, ": '", prefix, "params' lists parameter ",
                   ids.data<int64_t>()[j], " that another entry already lists");
        if (owns(i)) local_ids.push_back(local_index_[i]);
      }
      first += groups_[g].params.size();
      local.insert(prefix + "params", from_vector<int64_t>(local_ids, {static_cast<int64_t>(local_ids.size())}));
      for (const auto& [rest, t] : entries) {
        if (rest != "params") local.insert(prefix + rest, t);
      }
    }
    for (const auto& [id, entries] : state_keys) {
      auto found = param_of_id.find(id);
      KILN_CHECK(found != param_of_id.end(), op, ": 'state.", id, ".", entries.begin()->first, "' is for parameter ",
                 id, ", which no param group lists");
      if (!owns(found->second)) continue;
      for (const auto& [rest, t] : entries) {
        local.insert("state." + std::to_string(local_index_[found->second]) + "." + rest, t);
      }
    }
    return local;
  };

  // Every rank tries its part; then they agree, so that either all load or
  // none changes.
  std::string error;
  const TensorDict before = local_->state_dict();
  try {
    local_->load_state_dict(localize());
  } catch (const Error& e) {
    size_t first = 0;
    while (first < params_.size() && !owns(first)) ++first;
    error = e.message() + " (this rank's optimizer numbers its parameters from 0: its parameter k is parameter k + " +
            std::to_string(first) + " of the whole)";
  }
  const Device where = group_->collective_device();
  Tensor failed = full({1}, error.empty() ? 0.0 : 1.0, {DType::Int64, where});
  Tensor all = empty({group_->size()}, {DType::Int64, where});
  group_->all_gather_into_tensor(all, failed)->wait();
  all = all.cpu();
  std::string failing;
  for (int r = 0; r < group_->size(); ++r) {
    if (all.at<int64_t>({r}) != 0) failing += (failing.empty() ? "" : ", ") + std::to_string(r);
  }
  KILN_CHECK(error.empty(), op, " (rank ", rank, "): ", error);
  if (!failing.empty()) {
    local_->load_state_dict(before);
    KILN_FAIL(op, " (rank ", rank, "): rank(s) ", failing,
              " could not load their part of the state dict (their errors say why); this rank keeps its previous "
              "state");
  }
}

}  // namespace kiln::distributed
