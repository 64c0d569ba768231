// Param groups, zero_grad and the state dict shared by every optimizer.
#include "optim/optimizer.h"

#include <charconv>
#include <unordered_set>

#include "tensor/elementwise.h"
#include "tensor/factory.h"

namespace kiln::optim {

namespace {

// Splits "<prefix><n>.<rest>" into n and rest; false when `key` has another form.
bool split_key(const std::string& key, std::string_view prefix, int64_t& n, std::string& rest) {
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot + 1 == key.size()) return false;
  const char* first = key.data() + prefix.size();
  const char* last = key.data() + dot;
  auto [end, ec] = std::from_chars(first, last, n);
  if (ec != std::errc() || end != last || n < 0) return false;
  rest = key.substr(dot + 1);
  return true;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

StateDictEntries split_state_dict(const TensorDict& dict, std::string_view op) {
  StateDictEntries entries;
  for (const auto& [key, t] : dict) {
    int64_t n = 0;
    std::string rest;
    if (split_key(key, "param_groups.", n, rest)) {
      entries.groups[n][rest] = t;
    } else if (split_key(key, "state.", n, rest)) {
      entries.state[n][rest] = t;
    } else {
      KILN_FAIL(op, ": unexpected key '", key, "' (keys are param_groups.<group>.<name> and state.<param>.<name>)");
    }
  }
  return entries;
}

std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay) {
  ParamGroup decay{{}, {{"weight_decay", weight_decay}}};
  ParamGroup no_decay{{}, {{"weight_decay", 0.0}}};
  for (const Tensor& p : params) {
    if (!p.defined() || !p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  }
  return {decay, no_decay};
}

void zero_grads(const std::vector<Tensor>& params, bool set_to_none) {
  for (const Tensor& p : params) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
      continue;
    }
    // A grad made by backward(create_graph=true) is the output of a graph;
    // zeroing it in place would corrupt that graph, so keep only its data.
    if (grad.requires_grad() || !grad.is_leaf()) {
      grad = grad.detach();
      p.set_grad(grad);
    }
    ops::zero_(grad);
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& group : groups_) zero_grads(group.params, set_to_none);
}

void Optimizer::add_param_group(const ParamGroup& group) {
  const std::string op = name() + "::add_param_group";
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& existing : groups_)
    for (const Tensor& p : existing.params) seen.insert(p.impl());
  for (size_t j = 0; j < group.params.size(); ++j) {
    const Tensor& p = group.params[j];
    KILN_CHECK(p.defined(), op, ": parameter ", j, " of the new group is undefined");
    KILN_CHECK(p.is_floating_point(), op, ": parameter ", j, " of the new group has dtype ", p.dtype(),
               "; only floating-point tensors can be optimized");
    KILN_CHECK(p.is_leaf(), op, ": parameter ", j, " of the new group is not a leaf (it was computed by ",
               p.grad_fn_name(), "); only leaf tensors can be optimized");
    KILN_CHECK(seen.insert(p.impl()).second, op, ": parameter ", j,
               " of the new group is already in a param group (or twice in this one)");
  }
  append_options(group.options);
  groups_.push_back({group.params, std::nullopt});
}

void Optimizer::add_initial_groups(const std::vector<ParamGroup>& groups) {
  size_t total = 0;
  for (const auto& g : groups) total += g.params.size();
  KILN_CHECK(total > 0, name(), ": got an empty parameter list");
  for (const auto& g : groups) add_param_group(g);
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  KILN_CHECK(group < groups_.size(), name(), ": no param group ", group, " (there are ", groups_.size(), ")");
  return groups_[group].params;
}

bool Optimizer::has_hyperparameter(std::string_view name) const {
  for (const auto& n : hyperparameter_names())
    if (n == name) return true;
  return false;
}

void Optimizer::set_hyperparameters(size_t group, const std::map<std::string, double>& values) {
  params(group);  // checks the index
  write_hyperparameters(group, values, /*validate=*/true, "set_hyperparameters");
}

void Optimizer::set_hyperparameter(size_t group, std::string_view name, double value) {
  set_hyperparameters(group, {{std::string(name), value}});
}

void Optimizer::set_lr(size_t group, double lr) {
  params(group);
  write_hyperparameters(group, {{"lr", lr}}, /*validate=*/false, "set_lr");
}

std::optional<double> Optimizer::initial_lr(size_t group) const {
  params(group);
  return groups_[group].initial_lr;
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  params(group);
  groups_[group].initial_lr = lr;
}

const TensorDict& Optimizer::state(const Tensor& param) const {
  static const TensorDict kEmpty;
  auto it = state_.find(param.impl());
  return it == state_.end() ? kEmpty : it->second;
}

TensorDict& Optimizer::mutable_state(const Tensor& param) { return state_[param.impl()]; }

std::string Optimizer::describe_param(size_t group, size_t index_in_group) const {
  size_t index = index_in_group;
  for (size_t g = 0; g < group; ++g) index += groups_[g].params.size();
  return detail::str("parameter ", index, " (group ", group, ")");
}

TensorDict Optimizer::state_dict() const {
  TensorDict dict;
  int64_t index = 0;
  for (const auto& group : groups_) {
    for (const Tensor& p : group.params) {
      for (const auto& [entry, t] : state(p)) dict.insert("state." + std::to_string(index) + "." + entry, t);
      ++index;
    }
  }
  index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids;
    for (size_t j = 0; j < groups_[g].params.size(); ++j) ids.push_back(index++);
    dict.insert(prefix + "params", from_vector<int64_t>(ids, {static_cast<int64_t>(ids.size())}));
    for (const auto& hp : hyperparameter_names())
      dict.insert(prefix + hp, scalar_tensor(hyperparameter(g, hp), DType::Float64));
    if (groups_[g].initial_lr)
      dict.insert(prefix + "initial_lr", scalar_tensor(*groups_[g].initial_lr, DType::Float64));
  }
  return dict;
}

// Three passes: sort the keys, check and stage the groups, then check the
// state against the staged hyperparameters (which decide, for example,
// whether max_exp_avg_sq is required). The hyperparameters are set before
// the state is checked, and put back if any check fails. Their values are
// not range-checked (Note [Optimizer state dict]); flags must still be 0 or 1.
void Optimizer::load_state_dict(const TensorDict& dict) {
  const std::string op = name() + "::load_state_dict";

  StateDictEntries entries = split_state_dict(dict, op);
  auto& group_keys = entries.groups;  // group -> name -> value
  auto& state_keys = entries.state;   // saved parameter id -> entry -> value
  KILN_CHECK(group_keys.size() == groups_.size(), op, ": the state dict has ", group_keys.size(),
             " param groups but the optimizer has ", groups_.size());

  struct Staged {
    std::map<std::string, double> values;
    std::optional<double> initial_lr;
  };
  std::vector<Staged> staged(groups_.size());
  struct Slot {
    size_t group;
    Tensor param;
  };
  std::map<int64_t, Slot> slots;  // saved parameter id -> the parameter it is now
  const std::vector<std::string> names = hyperparameter_names();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    auto found = group_keys.find(static_cast<int64_t>(g));
    KILN_CHECK(found != group_keys.end(), op, ": missing key '", prefix, "params'");
    auto entries = found->second;
    auto ids_it = entries.find("params");
    KILN_CHECK(ids_it != entries.end(), op, ": missing key '", prefix, "params'");
    const Tensor ids = ids_it->second.to(DType::Int64).cpu().contiguous();
    KILN_CHECK(ids.dim() == 1, op, ": '", prefix, "params' must be 1-d, got shape ", ids.shape());
    KILN_CHECK(ids.numel() == static_cast<int64_t>(groups_[g].params.size()), op, ": '", prefix, "params' lists ",
               ids.numel(), " parameters but group ", g, " of the optimizer has ", groups_[g].params.size());
    for (int64_t j = 0; j < ids.numel(); ++j) {
      int64_t id = ids.data<int64_t>()[j];
      KILN_CHECK(slots.emplace(id, Slot{g, groups_[g].params[j]}).second, op, ": '", prefix, "params' lists parameter ",
                 id, " that another entry already lists");
    }
    entries.erase("params");
    for (const auto& hp : names) {
      auto it = entries.find(hp);
      KILN_CHECK(it != entries.end(), op, ": missing key '", prefix, hp, "'");
      KILN_CHECK(it->second.numel() == 1, op, ": '", prefix, hp, "' must hold one number, got shape ",
                 it->second.shape());
      staged[g].values[hp] = it->second.item<double>();
      entries.erase(it);
    }
    if (auto it = entries.find("initial_lr"); it != entries.end()) {
      KILN_CHECK(it->second.numel() == 1, op, ": '", prefix, "initial_lr' must hold one number, got shape ",
                 it->second.shape());
      staged[g].initial_lr = it->second.item<double>();
      entries.erase(it);
    }
    KILN_CHECK(entries.empty(), op, ": unexpected key '", prefix, entries.begin()->first, "' (", name(),
               " has: ", join(names), ")");
  }

  std::vector<Staged> previous(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& hp : names) previous[g].values[hp] = hyperparameter(g, hp);
    previous[g].initial_lr = groups_[g].initial_lr;
  }
  auto restore = [&] {
    for (size_t g = 0; g < groups_.size(); ++g) {
      write_hyperparameters(g, previous[g].values, /*validate=*/false, "load_state_dict");
      groups_[g].initial_lr = previous[g].initial_lr;
    }
  };

  std::unordered_map<const TensorImpl*, TensorDict> new_state;
  try {
    for (size_t g = 0; g < groups_.size(); ++g) {
      write_hyperparameters(g, staged[g].values, /*validate=*/false, "load_state_dict");
      groups_[g].initial_lr = staged[g].initial_lr;
    }
    for (const auto& [id, entries] : state_keys) {
      const std::string prefix = "state." + std::to_string(id) + ".";
      auto slot = slots.find(id);
      KILN_CHECK(slot != slots.end(), op, ": '", prefix, entries.begin()->first, "' is for parameter ", id,
                 ", which no param group lists");
      const Tensor& param = slot->second.param;
      const std::vector<StateEntry> known = param_state_entries(slot->second.group, param);
      TensorDict loaded;
      for (const StateEntry& entry : known) {
        auto it = entries.find(entry.name);
        if (it == entries.end()) {
          KILN_CHECK(!entry.required, op, ": missing key '", prefix, entry.name, "'");
          continue;
        }
        const Tensor& value = it->second;
        if (entry.form) {
          KILN_CHECK(value.shape() == entry.form->shape && value.dtype() == entry.form->dtype, op, ": '", prefix,
                     entry.name, "' is ", value.dtype(), " of shape ", value.shape(), " but ", name(), " keeps ",
                     entry.form->dtype, " of shape ", entry.form->shape, " for parameter ", id);
          Tensor copy = Tensor::empty(entry.form->shape, {entry.form->dtype, param.device()});
          copy.copy_(value);
          loaded.insert(entry.name, copy);
        } else if (entry.per_element) {
          KILN_CHECK(value.shape() == param.shape(), op, ": '", prefix, entry.name, "' has shape ", value.shape(),
                     " but parameter ", id, " has shape ", param.shape());
          Tensor copy = Tensor::empty(param.shape(), {param.dtype(), param.device()});
          copy.copy_(value);
          loaded.insert(entry.name, copy);
        } else {
          KILN_CHECK(value.numel() == 1, op, ": '", prefix, entry.name, "' must hold one number, got shape ",
                     value.shape());
          loaded.insert(entry.name, scalar_tensor(value.item<double>(), DType::Float64));
        }
      }
      for (const auto& [entry_name, value] : entries) {
        if (loaded.contains(entry_name)) continue;
        std::vector<std::string> known_names;
        for (const auto& e : known) known_names.push_back(e.name);
        KILN_FAIL(op, ": unexpected key '", prefix, entry_name, "' (", name(), " keeps: ", join(known_names), ")");
      }
      new_state.emplace(param.impl(), std::move(loaded));
    }
  } catch (...) {
    restore();
    throw;
  }
  state_ = std::move(new_state);
}

}  // namespace kiln::optim
