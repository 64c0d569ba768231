// Sharded checkpoints of an FSDP model and its optimizer (Note [FSDP
// checkpoint contents] in state_dict.h), and of a plain module in one
// process, which is the same thing with every parameter whole.
#include "distributed/fsdp/state_dict.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "distributed/checkpoint/sharded_checkpoint.h"
#include "distributed/fsdp/state_dict_internal.h"
#include "tensor/factory.h"

namespace kiln::distributed::fsdp {

namespace detail {

Holding holding_of(FullyShardedDataParallel& fsdp) {
  Holding h;
  h.params = fsdp.parameter_shards();
  // A part of no elements may lie anywhere, even before the parameter (its
  // unit's shard begins past it); as a piece it must lie inside.
  for (ParamShard& s : h.params)
    if (s.local_numel == 0) s.offset = std::clamp<int64_t>(s.offset, 0, shape_numel(s.global_shape));
  h.buffers = persistent_buffers(fsdp.module());
  h.group = &fsdp.group();
  return h;
}

Holding holding_of(nn::Module& module) {
  Holding h;
  for (const auto& [name, p] : module.named_parameters())
    h.params.push_back({name, p, p.shape(), p.dtype(), 0, p.numel(), true});
  h.buffers = persistent_buffers(module);
  return h;
}

std::vector<std::pair<std::string, Tensor>> persistent_buffers(const nn::Module& module) {
  const TensorDict state = module.state_dict();
  std::vector<std::pair<std::string, Tensor>> buffers;
  for (const auto& [name, b] : module.named_buffers())
    if (state.contains(name)) buffers.emplace_back(name, b);
  return buffers;
}

void check_between_steps(const ParamShard& s, const char* op) {
  KILN_CHECK(s.param.numel() == s.local_numel, op, ": parameter '", s.name, "' holds ", s.param.numel(),
             " elements on this rank but its shard has ", s.local_numel,
             " (save and load between steps, not inside forward or backward)");
}

std::vector<OptimizerParam> optimizer_params(const optim::Optimizer& optimizer, const Holding& h, const char* op) {
  std::unordered_map<const TensorImpl*, const ParamShard*> by_impl;
  for (const ParamShard& s : h.params) by_impl.emplace(s.param.impl(), &s);
  std::vector<OptimizerParam> params;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    for (const Tensor& p : optimizer.params(g)) {
      auto it = by_impl.find(p.impl());
      KILN_CHECK(it != by_impl.end(), op, ": ", optimizer.name(), "'s parameter ", params.size(), " (group ", g,
                 ", shape ", p.shape(), ") is not a parameter of the module");
      params.push_back({g, it->second});
    }
  }
  return params;
}

std::set<std::string> scalar_entries(const optim::Optimizer& optimizer, const std::vector<OptimizerParam>& params) {
  std::set<std::string> scalars;
  for (const OptimizerParam& p : params) {
    for (const auto& [entry, t] : optimizer.state(p.shard->param))
      if (t.dim() == 0 && p.shard->param.dim() > 0) scalars.insert(entry);
  }
  return scalars;
}

bool is_per_element(const std::string& entry, const Tensor& value, const ParamShard& s,
                    const std::set<std::string>& scalars, const char* op) {
  if (!scalars.contains(entry) && value.shape() == s.param.shape()) return true;
  KILN_CHECK(value.numel() == 1, op, ": optimizer state '", entry, "' of parameter '", s.name, "' has shape ",
             value.shape(), ", neither the parameter's (", s.param.shape(), ") nor a single number");
  return false;
}

}  // namespace detail

namespace {

using checkpoint::ShardPiece;
using detail::Holding;
using detail::OptimizerParam;
using Json = nlohmann::json;

constexpr char kModelPrefix[] = "model.";
constexpr char kStatePrefix[] = "optimizer.state.";
constexpr char kGroupsPrefix[] = "optimizer.param_groups.";
constexpr char kOptimizerKey[] = "optimizer";
constexpr char kGroupsKey[] = "optimizer.param_groups";
constexpr char kScalarsKey[] = "optimizer.scalar_state";

// `t`'s elements as a 1-d tensor of `numel`: a view where `t` is contiguous.
Tensor flat(const Tensor& t, int64_t numel) { return t.detach().reshape({numel}); }

std::string group_key(size_t group, const std::string& name) {
  return kGroupsPrefix + std::to_string(group) + "." + name;
}

// ---- saving ---------------------------------------------------------------------

void add_optimizer_pieces(const optim::Optimizer& optimizer, const Holding& h, std::vector<ShardPiece>& pieces,
                          std::map<std::string, std::string>& metadata, const char* op) {
  const std::vector<OptimizerParam> params = detail::optimizer_params(optimizer, h, op);
  const std::set<std::string> scalars = detail::scalar_entries(optimizer, params);
  Json groups = Json::array();
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) groups.push_back(Json::array());
  for (const OptimizerParam& p : params) groups[p.group].push_back(p.shard->name);
  metadata[kOptimizerKey] = optimizer.name();
  metadata[kGroupsKey] = groups.dump();
  metadata[kScalarsKey] = Json(scalars).dump();

  if (h.rank() == 0) {
    for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
      auto add = [&](const std::string& name, double value) {
        pieces.push_back({group_key(g, name), {}, DType::Float64, 0, full({1}, value, DType::Float64)});
      };
      for (const std::string& name : optimizer.hyperparameter_names()) add(name, optimizer.hyperparameter(g, name));
      if (auto initial = optimizer.initial_lr(g)) add("initial_lr", *initial);
    }
  }
  for (const OptimizerParam& p : params) {
    const ParamShard& s = *p.shard;
    // Single numbers are written once: by the writer that holds the
    // parameter's first element (rank 0 for a parameter of no elements).
    const bool holds_first =
        s.writer && ((s.offset == 0 && s.local_numel > 0) || (shape_numel(s.global_shape) == 0 && h.rank() == 0));
    for (const auto& [entry, value] : optimizer.state(s.param)) {
      const std::string name = kStatePrefix + s.name + "." + entry;
      if (detail::is_per_element(entry, value, s, scalars, op)) {
        if (s.writer) pieces.push_back({name, s.global_shape, value.dtype(), s.offset, flat(value, s.local_numel)});
      } else if (holds_first) {
        pieces.push_back({name, {}, value.dtype(), 0, flat(value, 1)});
      } else if (h.rank() == 0) {
        // Declared, so that rank 0 names every tensor and the checkpoint
        // lists them in the same order whatever the world size.
        pieces.push_back({name, {}, value.dtype(), 0, Tensor::empty({0}, value.dtype())});
      }
    }
  }
}

void save_holding(const std::string& dir, const Holding& h, const optim::Optimizer* optimizer,
                  std::map<std::string, std::string> metadata) {
  const char* op = "save_sharded_checkpoint";
  for (const auto& [key, value] : metadata) {
    KILN_CHECK(!key.starts_with(kOptimizerKey), op, ": metadata key '", key,
               "' is reserved (keys starting with \"optimizer\" describe the optimizer)");
  }
  std::vector<ShardPiece> pieces;
  for (const ParamShard& s : h.params) {
    detail::check_between_steps(s, op);
    if (s.writer)
      pieces.push_back({kModelPrefix + s.name, s.global_shape, s.dtype, s.offset, flat(s.param, s.local_numel)});
  }
  if (h.rank() == 0) {
    for (const auto& [name, b] : h.buffers)
      pieces.push_back({kModelPrefix + name, b.shape(), b.dtype(), 0, flat(b, b.numel())});
  }
  if (optimizer != nullptr) add_optimizer_pieces(*optimizer, h, pieces, metadata, op);
  if (h.group != nullptr) {
    checkpoint::save_sharded(dir, pieces, *h.group, metadata);
  } else {
    checkpoint::save_sharded(dir, pieces, metadata);
  }
}

// ---- loading --------------------------------------------------------------------

// Where load_pieces writes a tensor's elements: a 1-d view of it when it
// is contiguous, else a staging tensor copied in afterwards.
struct Destinations {
  std::vector<std::pair<Tensor, Tensor>> staged;  // (tensor, staging)

  Tensor into(const Tensor& t, int64_t numel) {
    Tensor target = t.detach();
    if (target.is_contiguous()) return target.view({numel});
    Tensor staging = Tensor::empty({numel}, {target.dtype(), target.device()});
    staged.emplace_back(target, staging);
    return staging;
  }
  void finish() {
    NoGradGuard no_grad;
    for (auto& [target, staging] : staged) target.copy_(staging.view(target.shape()));
  }
};

std::vector<std::string> parse_list(const Json& list, const std::string& where) {
  try {
    return list.get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(where, " is not a list of names: ", e.what());
  }
}

Json parse_json(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(where, " is not JSON: ", e.what());
  }
}

// Checks that the checkpoint's optimizer is of `optimizer`'s kind and
// groups the same parameters, then asks for its state; the state dict in
// the optimizer's format is in *dict once `wanted` has been loaded.
void want_optimizer(const checkpoint::Index& index, const optim::Optimizer& optimizer, const Holding& h,
                    std::vector<ShardPiece>& wanted, TensorDict& dict, const char* op) {
  const std::string where = std::string(op) + ": '" + index.dir + "'";
  auto meta = [&](const char* key) -> const std::string& {
    auto it = index.metadata.find(key);
    KILN_CHECK(it != index.metadata.end(), where, ": the checkpoint holds no optimizer state (no metadata '", key,
               "'); it was saved without an optimizer");
    return it->second;
  };
  KILN_CHECK(meta(kOptimizerKey) == optimizer.name(), where, ": the checkpoint holds the state of ",
             meta(kOptimizerKey), ", not of ", optimizer.name());
  const std::string groups_where = where + ": metadata '" + kGroupsKey + "'";
  const Json saved_groups = parse_json(meta(kGroupsKey), groups_where);
  KILN_CHECK(saved_groups.is_array() && saved_groups.size() == optimizer.num_param_groups(), where,
             ": the checkpoint's ", meta(kOptimizerKey), " has ", saved_groups.is_array() ? saved_groups.size() : 0,
             " param groups but this one has ", optimizer.num_param_groups());
  std::map<std::string, size_t> saved_group_of;
  for (size_t g = 0; g < saved_groups.size(); ++g)
    for (const std::string& name : parse_list(saved_groups[g], groups_where)) saved_group_of.emplace(name, g);
  const std::vector<OptimizerParam> params = detail::optimizer_params(optimizer, h, op);
  std::set<std::string> current;
  for (const OptimizerParam& p : params) {
    auto it = saved_group_of.find(p.shard->name);
    KILN_CHECK(it != saved_group_of.end(), where, ": parameter '", p.shard->name, "' is in param group ", p.group,
               " of the optimizer but in none of the checkpoint's");
    KILN_CHECK(it->second == p.group, where, ": parameter '", p.shard->name, "' is in param group ", p.group,
               " of the optimizer but in group ", it->second, " of the checkpoint");
    current.insert(p.shard->name);
  }
  for (const auto& [name, g] : saved_group_of)
    KILN_CHECK(current.contains(name), where, ": the checkpoint's optimizer steps parameter '", name, "' (group ", g,
               "), which this optimizer does not");
  const std::string scalars_where = where + ": metadata '" + kScalarsKey + "'";
  const std::vector<std::string> scalar_list = parse_list(parse_json(meta(kScalarsKey), scalars_where), scalars_where);
  const std::set<std::string> scalars(scalar_list.begin(), scalar_list.end());

  // The saved entries of each parameter, from the names in the index.
  std::map<std::string, std::vector<std::string>> entries_of;
  for (const checkpoint::TensorInfo& t : index.tensors) {
    if (!t.name.starts_with(kStatePrefix)) continue;
    const std::string rest = t.name.substr(std::char_traits<char>::length(kStatePrefix));
    const size_t dot = rest.rfind('.');
    if (dot != std::string::npos) entries_of[rest.substr(0, dot)].push_back(rest.substr(dot + 1));
  }

  auto want_number = [&](const std::string& name) {
    Tensor value = Tensor::empty({1}, DType::Float64);
    wanted.push_back({name, {}, DType::Float64, 0, value});
    return value.view({});
  };
  int64_t id = 0;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids;
    for (size_t j = 0; j < optimizer.params(g).size(); ++j) ids.push_back(id++);
    dict.insert(prefix + "params", from_vector<int64_t>(ids, {static_cast<int64_t>(ids.size())}));
    for (const std::string& name : optimizer.hyperparameter_names())
      dict.insert(prefix + name, want_number(group_key(g, name)));
    if (index.find(group_key(g, "initial_lr")))
      dict.insert(prefix + "initial_lr", want_number(group_key(g, "initial_lr")));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamShard& s = *params[i].shard;
    for (const std::string& entry : entries_of[s.name]) {
      const std::string name = kStatePrefix + s.name + "." + entry;
      const std::string key = "state." + std::to_string(i) + "." + entry;
      if (scalars.contains(entry)) {
        dict.insert(key, want_number(name));
      } else {
        Tensor value = Tensor::empty({s.local_numel}, s.param.dtype());
        wanted.push_back({name, s.global_shape, s.param.dtype(), s.offset, value});
        dict.insert(key, value.view(s.param.shape()));
      }
    }
  }
}

void load_holding(const std::string& dir, const Holding& h, optim::Optimizer* optimizer) {
  const char* op = "load_sharded_checkpoint";
  const checkpoint::Index index = checkpoint::read_index(dir);
  std::vector<ShardPiece> wanted;
  TensorDict optimizer_dict;
  if (optimizer != nullptr) want_optimizer(index, *optimizer, h, wanted, optimizer_dict, op);
  Destinations destinations;
  for (const ParamShard& s : h.params) {
    detail::check_between_steps(s, op);
    wanted.push_back(
        {kModelPrefix + s.name, s.global_shape, s.dtype, s.offset, destinations.into(s.param, s.local_numel)});
  }
  for (const auto& [name, b] : h.buffers)
    wanted.push_back({kModelPrefix + name, b.shape(), b.dtype(), 0, destinations.into(b, b.numel())});
  checkpoint::load_pieces(index, wanted);
  destinations.finish();
  if (optimizer != nullptr) optimizer->load_state_dict(optimizer_dict);
}

FullyShardedDataParallel* as_fsdp(nn::Module& module) { return dynamic_cast<FullyShardedDataParallel*>(&module); }

}  // namespace

void save_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata) {
  save_holding(dir, detail::holding_of(fsdp), optimizer, metadata);
}

void load_sharded_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, optim::Optimizer* optimizer) {
  load_holding(dir, detail::holding_of(fsdp), optimizer);
}

void save_sharded_checkpoint(const std::string& dir, nn::Module& module, const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata) {
  if (FullyShardedDataParallel* fsdp = as_fsdp(module)) return save_sharded_checkpoint(dir, *fsdp, optimizer, metadata);
  save_holding(dir, detail::holding_of(module), optimizer, metadata);
}

void load_sharded_checkpoint(const std::string& dir, nn::Module& module, optim::Optimizer* optimizer) {
  if (FullyShardedDataParallel* fsdp = as_fsdp(module)) return load_sharded_checkpoint(dir, *fsdp, optimizer);
  load_holding(dir, detail::holding_of(module), optimizer);
}

std::map<std::string, std::string> checkpoint_metadata(const std::string& dir) {
  std::map<std::string, std::string> metadata = checkpoint::read_index(dir).metadata;
  std::erase_if(metadata, [](const auto& entry) { return entry.first.starts_with(kOptimizerKey); });
  return metadata;
}

}  // namespace kiln::distributed::fsdp
