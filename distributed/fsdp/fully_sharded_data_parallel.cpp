#include "distributed/fsdp/fully_sharded_data_parallel.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "distributed/fsdp/flat_param.h"
#include "distributed/fsdp/state_dict.h"
#include "distributed/init.h"
#include "distributed/replica_sync.h"
#include "nn/container.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace kiln::distributed::fsdp {

const char* sharding_strategy_name(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::FullShard: return "FULL_SHARD";
    case ShardingStrategy::ShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::NoShard: return "NO_SHARD";
    case ShardingStrategy::HybridShard: return "HYBRID_SHARD";
  }
  return "?";
}

ShardingStrategy parse_sharding_strategy(std::string_view name) {
  std::string canonical;
  for (char c : name) canonical += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (ShardingStrategy s : {ShardingStrategy::FullShard, ShardingStrategy::ShardGradOp, ShardingStrategy::NoShard,
                             ShardingStrategy::HybridShard}) {
    if (canonical == sharding_strategy_name(s)) return s;
  }
  KILN_CHECK(false, "FSDP: unknown sharding strategy '", name,
             "'; expected full_shard, shard_grad_op, no_shard or hybrid_shard");
  return ShardingStrategy::FullShard;
}

const char* fsdp_event_name(FSDPEvent::Kind kind) {
  switch (kind) {
    case FSDPEvent::Kind::GatherIssued: return "gather_issued";
    case FSDPEvent::Kind::GatherWaited: return "gather_waited";
    case FSDPEvent::Kind::ForwardBegin: return "forward_begin";
    case FSDPEvent::Kind::ForwardEnd: return "forward_end";
    case FSDPEvent::Kind::BackwardBegin: return "backward_begin";
    case FSDPEvent::Kind::ReduceIssued: return "reduce_issued";
  }
  return "?";
}

WrapPolicy wrap_by_numel(int64_t min_numel) {
  KILN_CHECK(min_numel > 0, "FSDP: wrap_by_numel needs a positive parameter count, got ", min_numel);
  return [min_numel](const nn::Module& module, const std::string&, int64_t unwrapped) {
    // A container is never called itself (its owner calls its members), so
    // its parameters would never be gathered.
    if (dynamic_cast<const nn::ModuleList*>(&module) || dynamic_cast<const nn::ModuleDict*>(&module)) return false;
    return unwrapped >= min_numel;
  };
}

WrapPolicy wrap_by_names(const nn::Module& root, std::vector<std::string> names) {
  for (const std::string& name : names) root.get_submodule(name);  // throws naming what is missing
  auto wanted = std::make_shared<std::set<std::string>>(names.begin(), names.end());
  return [wanted](const nn::Module&, const std::string& name, int64_t) { return wanted->count(name) > 0; };
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> module, FSDPOptions options)
    : nn::Module("FullyShardedDataParallel"),
      module_(std::move(module)),
      group_(options.group),
      options_(std::move(options)),
      start_time_(std::chrono::steady_clock::now()) {
  KILN_CHECK(module_ != nullptr, "FSDP: the module is null");
  KILN_CHECK(options_.max_gathers_in_flight >= 1, "FSDP: max_gathers_in_flight must be at least 1, got ",
             options_.max_gathers_in_flight);
  if (!group_) group_ = default_group_ptr();
  register_module("module", module_);
  claim_ = std::make_unique<GradientReductionClaim>(module_->named_parameters(), "FSDP");
  check_same_parameters_on_every_rank(*group_, module_->named_parameters(), "FSDP");
  if (options_.sync_module_states) {
    std::vector<Tensor> state = module_->parameters();
    for (const Tensor& b : module_->buffers()) state.push_back(b);
    broadcast_from_rank0(*group_, state);
  }
  if (options_.mixed_precision.buffer_dtype) {
    NoGradGuard no_grad;
    for (const auto& [name, b] : module_->named_buffers()) {
      if (is_floating(b.dtype())) b.impl()->set_storage(b.to(*options_.mixed_precision.buffer_dtype), b.shape());
    }
  }
  make_groups();
  build_units();
  register_state_dict_hooks();
  // Buffers live where the units compute (with cpu_offload the model may
  // have been built in host memory).
  Device compute = units_.front()->compute_device();
  NoGradGuard no_grad;
  for (const auto& [name, b] : module_->named_buffers()) {
    if (b.device() != compute) b.impl()->set_storage(b.to(compute), b.shape());
  }
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (size_t i = 0; i < hooked_params_.size(); ++i) hooked_params_[i].remove_hook(grad_hook_ids_[i]);
  for (nn::HookHandle& h : hooks_) h.remove();
}

// Note [FSDP sharding strategies]: S ranks per shard group, R groups.
void FullyShardedDataParallel::make_groups() {
  const int W = group_->size(), rank = group_->rank();
  int S = W;
  switch (options_.strategy) {
    case ShardingStrategy::FullShard:
    case ShardingStrategy::ShardGradOp: S = W; break;
    case ShardingStrategy::NoShard: S = 1; break;
    case ShardingStrategy::HybridShard: {
      S = options_.hybrid_shard_size;
      if (S == 0) {
        const char* local = std::getenv("LOCAL_WORLD_SIZE");
        KILN_CHECK(local != nullptr, "FSDP: HYBRID_SHARD needs hybrid_shard_size, or LOCAL_WORLD_SIZE (set by "
                   "kiln-run) to take it from");
        S = std::atoi(local);
      }
      KILN_CHECK(S >= 1 && W % S == 0, "FSDP: HYBRID_SHARD's shard groups of ", S,
                 " ranks must divide the group's ", W, " ranks");
      break;
    }
  }
  const int R = W / S;
  if (S == W) {
    if (S > 1) shard_group_ = group_;
  } else if (S == 1) {
    replicate_group_ = group_;
  } else {
    // Every rank takes part in making every sub-group, in one order.
    ProcessGroupOptions sub;
    sub.timeout = group_->timeout();
    sub.heartbeat_timeout = group_->heartbeat_timeout();
    sub.debug = group_->debug();
    for (int g = 0; g < R; ++g) {
      std::vector<int> ranks;
      for (int i = 0; i < S; ++i) ranks.push_back(g * S + i);
      sub.name = group_->name() + "/fsdp-shard" + std::to_string(g);
      auto made = group_->new_subgroup(ranks, sub);
      if (made) shard_group_ = made;
    }
    for (int i = 0; i < S; ++i) {
      std::vector<int> ranks;
      for (int g = 0; g < R; ++g) ranks.push_back(g * S + i);
      sub.name = group_->name() + "/fsdp-replica" + std::to_string(i);
      auto made = group_->new_subgroup(ranks, sub);
      if (made) replicate_group_ = made;
    }
  }
  (void)rank;
}

void FullyShardedDataParallel::build_units() {
  // Units by the policy, children before parents (so the deepest modules
  // over a size claim their parameters first, Note [FSDP execution order]).
  std::vector<nn::NamedModule> all = module_->named_modules("", /*include_self=*/false);
  std::unordered_map<const TensorImpl*, size_t> owner;  // parameter -> position in `wrapped`
  std::vector<nn::NamedModule> wrapped;
  if (options_.wrap_policy) {
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < all.size(); ++i) order[i] = all.size() - 1 - i;  // pre-order reversed: children first
    std::vector<std::pair<size_t, size_t>> claims;  // (position in `all`, unit slot)
    for (size_t i : order) {
      const auto& [name, m] = all[i];
      int64_t unwrapped = 0;
      for (const Tensor& p : m->parameters()) {
        if (!owner.count(p.impl())) unwrapped += p.numel();
      }
      if (unwrapped == 0 || !options_.wrap_policy(*m, name, unwrapped)) continue;
      wrapped.push_back({name, m});
      for (const Tensor& p : m->parameters()) owner.emplace(p.impl(), wrapped.size() - 1);
    }
  }
  // Units numbered root first, then the wrapped modules in pre-order
  // (module order), which is usually the order they run in.
  std::vector<size_t> slot_order(wrapped.size());
  for (size_t i = 0; i < wrapped.size(); ++i) slot_order[i] = wrapped.size() - 1 - i;
  TensorDict named = module_->named_parameters();
  std::vector<std::pair<std::string, Tensor>> root_params;
  std::vector<std::vector<std::pair<std::string, Tensor>>> unit_params(wrapped.size());
  for (const auto& [name, p] : named) {
    auto it = owner.find(p.impl());
    if (it == owner.end()) {
      root_params.emplace_back(name, p);
    } else {
      unit_params[it->second].emplace_back(name, p);
    }
  }
  UnitContext context;
  context.shard_group = shard_group_;
  context.replicate_group = replicate_group_;
  context.shard_size = shard_group_ ? shard_group_->size() : 1;
  context.shard_rank = shard_group_ ? shard_group_->rank() : 0;
  context.world_size = group_->size();
  context.param_dtype = options_.mixed_precision.param_dtype;
  context.reduce_dtype = options_.mixed_precision.reduce_dtype;
  context.cpu_offload = options_.cpu_offload;
  Device device = named.empty() ? kCPU : named.begin()->second.device();
  context.compute_device = options_.compute_device.value_or(device);
  KILN_CHECK(!options_.cpu_offload || context.compute_device.is_cuda() || context.compute_device.is_cpu(),
             "FSDP: cpu_offload needs a compute device");
  context.unit_count = (root_params.empty() ? 0 : 1) + wrapped.size();
  KILN_CHECK(context.unit_count > 0, "FSDP: ", module_->name(), " has no parameters to shard");

  std::vector<std::shared_ptr<nn::Module>> unit_modules;
  if (!root_params.empty()) {
    units_.push_back(std::make_unique<FlatParamUnit>(0, "", root_params, context));
    unit_modules.push_back(nullptr);
  }
  for (size_t slot : slot_order) {
    size_t index = units_.size();
    units_.push_back(std::make_unique<FlatParamUnit>(index, wrapped[slot].first, unit_params[slot], context));
    unit_modules.push_back(wrapped[slot].second);
  }
  has_root_unit_ = !root_params.empty();
  const size_t n = units_.size();
  backward_begun_.assign(n, false);
  gradients_arrived_.assign(n, 0);
  reduced_.assign(n, false);
  gradients_expected_.assign(n, 0);
  for (size_t u = 0; u < n; ++u) {
    for (const auto& m : units_[u]->members()) gradients_expected_[u] += m.param.requires_grad() ? 1 : 0;
  }
  register_hooks(unit_modules);
}

void FullyShardedDataParallel::register_hooks(const std::vector<std::shared_ptr<nn::Module>>& unit_modules) {
  for (size_t u = 0; u < units_.size(); ++u) {
    const std::shared_ptr<nn::Module>& m = unit_modules[u];
    if (m) {
      hooks_.push_back(m->register_forward_pre_hook([this, u](nn::Module&, const nn::TensorList&) {
        pre_forward(u);
        return std::optional<nn::TensorList>();
      }));
      hooks_.push_back(m->register_forward_hook([this, u](nn::Module&, const nn::TensorList&, const nn::TensorList&) {
        post_forward(u);
        return std::optional<nn::TensorList>();
      }));
      hooks_.push_back(m->register_full_backward_pre_hook([this, u](nn::Module&, const nn::TensorList&) {
        pre_backward(u);
        return std::optional<nn::TensorList>();
      }));
    }
    for (const auto& member : units_[u]->members()) {
      if (!member.param.requires_grad()) continue;
      hooked_params_.push_back(member.param);
      grad_hook_ids_.push_back(member.param.register_post_accumulate_grad_hook([this, u](const Tensor&) {
        after_gradient(u);
      }));
    }
  }
}

// The gradient of the whole model's output arrives first in backward (a
// hook on the output tensors themselves, so that calling forward() directly,
// without the wrapper's own module hooks, works too).
void FullyShardedDataParallel::begin_backward() {
  if (in_backward_) return;
  in_backward_ = true;
  autograd::queue_callback([this] { finish_backward(); });
  if (has_root_unit_) pre_backward(0);
}

// The wrapper's state_dict() is the model's full one under "module." keys
// (gathered: collective), and its load_state_dict() takes one, each rank
// keeping its shard's part: what a PyTorch user expects of the wrapper. The
// wrapped module's own state_dict() still shows the shards as they are.
void FullyShardedDataParallel::register_state_dict_hooks() {
  hooks_.push_back(register_state_dict_hook([this](const nn::Module&, TensorDict& state, const std::string& prefix) {
    const TensorDict full = full_state_dict(*this, /*rank0_only=*/false);
    for (const auto& [name, value] : full) state.insert_or_assign(prefix + "module." + name, value);
  }));
  hooks_.push_back(register_load_state_dict_pre_hook([this](nn::Module&, TensorDict& state, const std::string& prefix) {
    std::unordered_map<const TensorImpl*, ParamShard> shard_of;
    for (ParamShard& s : parameter_shards()) shard_of.emplace(s.param.impl(), s);
    // Every name of every parameter, a tied one's second name included.
    std::unordered_map<std::string, const ParamShard*> by_name;
    for (const auto& [module_name, m] : module_->named_modules()) {
      for (const auto& [name, p] : m->named_parameters(/*recurse=*/false)) {
        auto it = shard_of.find(p.impl());
        if (it != shard_of.end()) by_name[module_name.empty() ? name : module_name + "." + name] = &it->second;
      }
    }
    const std::string inner = prefix + "module.";
    TensorDict local;
    for (const auto& [key, value] : state) {
      Tensor part = value;
      auto it = key.starts_with(inner) ? by_name.find(key.substr(inner.size())) : by_name.end();
      // A full tensor for a parameter that is now its shard part: that part.
      if (it != by_name.end()) {
        const ParamShard& s = *it->second;
        if (value.shape() == s.global_shape && s.param.shape() != s.global_shape) {
          part = value.contiguous().reshape({value.numel()}).narrow(0, s.offset, s.local_numel);
        }
      }
      local.insert(key, part);
    }
    state = local;
  }));
}

void FullyShardedDataParallel::record(FSDPEvent::Kind kind, size_t unit, bool gather_was_complete) {
  if (!options_.record_events) return;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
  events_.push_back({kind, unit, in_backward_, seconds, gather_was_complete});
}

void FullyShardedDataParallel::gather(size_t u) {
  FlatParamUnit& unit = *units_[u];
  if (unit.state() == FlatParamUnit::State::Gathered) return;
  if (unit.state() == FlatParamUnit::State::Sharded) {
    unit.start_gather();
    record(FSDPEvent::Kind::GatherIssued, u);
  }
  bool complete = unit.gather_complete();
  unit.finish_gather();
  record(FSDPEvent::Kind::GatherWaited, u, complete);
}

// Issues the all-gathers of the units that come after `u` in the recorded
// forward order (before it, in backward), up to max_gathers_in_flight.
void FullyShardedDataParallel::prefetch(size_t u, bool backward) {
  if (forward_order_.empty()) return;
  if (backward ? !options_.backward_prefetch : !options_.forward_prefetch) return;
  // Where `u` ran (its last run, in backward). The root runs outside the
  // order: its backward begins the whole backward, before the last unit's,
  // so from it backward prefetches the last units of the forward order.
  const auto count = static_cast<int64_t>(forward_order_.size());
  int64_t position = -1;
  if (backward) {
    auto found = std::find(forward_order_.rbegin(), forward_order_.rend(), u);
    position = found == forward_order_.rend() ? count : count - 1 - (found - forward_order_.rbegin());
  } else {
    auto found = std::find(forward_order_.begin(), forward_order_.end(), u);
    if (found == forward_order_.end()) return;
    position = found - forward_order_.begin();
  }
  // Units gathered now besides the root: the one computing, those
  // prefetched, and in backward the one before it, not yet resharded while
  // its gradients are still being accumulated. The limit counts them all,
  // so that memory holds at most the computing unit and
  // max_gathers_in_flight others.
  auto gathered = [&] {
    int n = 0;
    for (size_t v = 0; v < units_.size(); ++v) {
      if (units_[v]->name().empty() || !units_[v]->needs_gather()) continue;
      n += units_[v]->state() != FlatParamUnit::State::Sharded ? 1 : 0;
    }
    return n;
  };
  for (int k = 1; k <= options_.max_gathers_in_flight; ++k) {
    int64_t next = backward ? position - k : position + k;
    if (next < 0 || next >= count) break;
    size_t v = forward_order_[next];
    if (backward && backward_begun_[v]) continue;
    FlatParamUnit& unit = *units_[v];
    if (unit.state() != FlatParamUnit::State::Sharded) continue;
    if (gathered() >= 1 + options_.max_gathers_in_flight) break;
    unit.start_gather();
    record(FSDPEvent::Kind::GatherIssued, v);
  }
}

nn::TensorList FullyShardedDataParallel::forward_many(const nn::TensorList& inputs) {
  const bool grad = GradMode::is_enabled();
  this_forward_.clear();
  nn::TensorList cast = inputs;
  if (options_.mixed_precision.param_dtype) {
    for (Tensor& t : cast) {
      if (t.defined() && is_floating(t.dtype())) t = t.to(*options_.mixed_precision.param_dtype);
    }
  }
  if (has_root_unit_) gather(0);
  if (!forward_order_.empty() && options_.forward_prefetch) {
    for (int k = 0; k < options_.max_gathers_in_flight && k < static_cast<int>(forward_order_.size()); ++k) {
      FlatParamUnit& unit = *units_[forward_order_[k]];
      if (unit.state() == FlatParamUnit::State::Sharded) {
        unit.start_gather();
        record(FSDPEvent::Kind::GatherIssued, forward_order_[k]);
      }
    }
  }
  // Through operator(), so that the wrapped module's hooks (and so the
  // units' gathers) run as they would without FSDP.
  nn::TensorList outputs = (*module_)(cast);
  if (grad) {
    if (forward_order_.empty()) forward_order_ = this_forward_;
    for (const Tensor& out : outputs) {
      if (out.defined() && out.requires_grad()) {
        out.register_hook([this](const Tensor&) {
          begin_backward();
          return Tensor();
        });
      }
    }
  } else {
    // No backward will come to reshard.
    reshard_all();
  }
  return outputs;
}

Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  nn::TensorList outputs = forward_many({input});
  KILN_CHECK(outputs.size() == 1, "FSDP: ", module_->name(), " returned ", outputs.size(),
             " tensors; call the FSDP module with a TensorList to receive them all");
  return std::move(outputs[0]);
}

void FullyShardedDataParallel::pre_forward(size_t u) {
  if (in_backward_) {
    // A unit's forward re-run by activation checkpointing inside backward.
    gather(u);
    return;
  }
  this_forward_.push_back(u);
  gather(u);
  prefetch(u, /*backward=*/false);
  record(FSDPEvent::Kind::ForwardBegin, u);
}

void FullyShardedDataParallel::post_forward(size_t u) {
  if (in_backward_) return;  // recomputation: its backward comes next
  record(FSDPEvent::Kind::ForwardEnd, u);
  const bool keep = GradMode::is_enabled() && options_.strategy == ShardingStrategy::ShardGradOp;
  if (!keep) units_[u]->reshard();
}

void FullyShardedDataParallel::pre_backward(size_t u) {
  if (backward_begun_[u]) return;
  backward_begun_[u] = true;
  record(FSDPEvent::Kind::BackwardBegin, u);
  gather(u);
  units_[u]->prepare_gradients();
  prefetch(u, /*backward=*/true);
}

void FullyShardedDataParallel::after_gradient(size_t u) {
  if (!in_backward_) return;  // a backward that does not go through the wrapper's output
  if (++gradients_arrived_[u] < gradients_expected_[u]) return;
  reduce(u);
  // Every use of the unit's parameters in this backward is behind us.
  if (gradients_expected_[u] == units_[u]->members().size()) units_[u]->reshard();
}

void FullyShardedDataParallel::reduce(size_t u) {
  if (reduced_[u]) return;
  reduced_[u] = true;
  // A unit whose output received no gradient never stashed its gradients.
  if (!backward_begun_[u]) {
    backward_begun_[u] = true;
    gather(u);
    units_[u]->prepare_gradients();
  }
  units_[u]->start_reduce(sync_);
  record(FSDPEvent::Kind::ReduceIssued, u);
  if (!sync_) return;
  // One reduction in flight, overlapping the next unit's backward: the one
  // before it has had that unit's whole backward to finish, and finishing
  // it frees its gradient buffer, so that the units' flat gradients do not
  // all live until backward ends.
  reducing_.push_back(u);
  while (reducing_.size() > 1) {
    units_[reducing_.front()]->finish_reduce();
    reducing_.pop_front();
  }
}

void FullyShardedDataParallel::finish_backward() {
  // Units some of whose parameters received no gradient are reduced now, in
  // one order on every rank; then every reduction is waited for.
  for (size_t u = units_.size(); u-- > 0;) reduce(u);
  for (size_t u : reducing_) units_[u]->finish_reduce();
  reducing_.clear();
  reshard_all();
  in_backward_ = false;
  std::fill(backward_begun_.begin(), backward_begun_.end(), false);
  std::fill(gradients_arrived_.begin(), gradients_arrived_.end(), 0);
  std::fill(reduced_.begin(), reduced_.end(), false);
}

void FullyShardedDataParallel::reshard_all() {
  for (auto& unit : units_) unit->reshard();
}

std::vector<UnitInfo> FullyShardedDataParallel::units() const {
  std::vector<UnitInfo> out;
  for (const auto& unit : units_) {
    UnitInfo info;
    info.name = unit->name();
    info.numel = unit->numel();
    info.shard_numel = unit->shard_numel();
    for (const auto& m : unit->members()) info.parameters.push_back(m.name);
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<ParamShard> FullyShardedDataParallel::parameter_shards() const {
  std::unordered_map<const TensorImpl*, ParamShard> by_param;
  const bool writer = !replicate_group_ || replicate_group_->rank() == 0;
  for (const auto& unit : units_) {
    for (const auto& m : unit->members()) {
      ParamShard s;
      s.name = m.name;
      s.param = m.param;
      s.global_shape = m.shape;
      s.dtype = unit->dtype();
      s.local_numel = m.local_end - m.local_begin;
      s.offset = s.local_numel > 0 ? m.local_begin : 0;
      s.writer = writer;
      by_param.emplace(m.param.impl(), std::move(s));
    }
  }
  std::vector<ParamShard> out;
  for (const auto& [name, p] : module_->named_parameters()) out.push_back(by_param.at(p.impl()));
  return out;
}

double FullyShardedDataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  KILN_CHECK(norm_type > 0, "FSDP clip_grad_norm_: norm_type must be positive, got ", norm_type);
  const bool inf = std::isinf(norm_type);
  double term = 0;
  for (const auto& unit : units_) {
    double t = unit->local_grad_norm_term(norm_type);
    term = inf ? std::max(term, t) : term + t;
  }
  // Replicas hold the same shards: the shard group alone sees each element once.
  if (shard_group_) {
    Tensor value = full({1}, term, {DType::Float64, shard_group_->collective_device()});
    shard_group_->all_reduce(value, inf ? ReduceOp::Max : ReduceOp::Sum)->wait();
    term = value.cpu().at<double>({0});
  }
  const double total = inf ? term : std::pow(term, 1.0 / norm_type);
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (const auto& unit : units_) {
      for (const auto& m : unit->members()) {
        Tensor g = m.param.grad();
        if (g.defined()) ops::mul_(g, coef);
      }
    }
  }
  return total;
}

void FullyShardedDataParallel::with_full_parameters(const std::function<void()>& fn, bool writeback) {
  KILN_CHECK(!in_backward_, "FSDP: with_full_parameters cannot run inside backward");
  for (size_t u = 0; u < units_.size(); ++u) gather(u);
  try {
    fn();
  } catch (...) {
    reshard_all();
    throw;
  }
  if (writeback) {
    for (auto& unit : units_) unit->write_back_full();
  }
  reshard_all();
}

std::shared_ptr<FullyShardedDataParallel> fully_shard(std::shared_ptr<nn::Module> root,
                                                      const std::vector<std::shared_ptr<nn::Module>>& modules,
                                                      FSDPOptions options) {
  auto chosen = std::make_shared<std::set<const nn::Module*>>();
  for (const auto& m : modules) {
    KILN_CHECK(m != nullptr, "fully_shard: a module to shard is null");
    chosen->insert(m.get());
  }
  std::set<const nn::Module*> found;
  for (const auto& named : root->named_modules("", false)) {
    if (chosen->count(named.second.get())) found.insert(named.second.get());
  }
  KILN_CHECK(found.size() == chosen->size(), "fully_shard: ", chosen->size() - found.size(),
             " of the modules given are not submodules of ", root->name());
  options.wrap_policy = [chosen](const nn::Module& m, const std::string&, int64_t) { return chosen->count(&m) > 0; };
  return std::make_shared<FullyShardedDataParallel>(std::move(root), std::move(options));
}

}  // namespace kiln::distributed::fsdp
