// FullyShardedDataParallel: data parallelism in which each of N ranks holds
// only 1/N of the parameters, gradients and optimizer state, as PyTorch's
// FullyShardedDataParallel and DeepSpeed's ZeRO-3.
//
//   distributed::init_process_group("gloo");
//   auto model = std::make_shared<nn::GPT>(config);
//   optim::AdamW opt(optim::weight_decay_groups(model->parameters(), 0.1), optim::AdamWOptions(6e-4));
//   fsdp::FSDPOptions options;
//   options.wrap_policy = fsdp::wrap_by_class<nn::gpt::Block>();
//   auto fsdp = std::make_shared<fsdp::FullyShardedDataParallel>(model, options);
//   for (...) {
//     opt.zero_grad();
//     Tensor logits = (*fsdp)(x);                  // units gathered one at a time
//     F::cross_entropy(logits.view({-1, V}), y.view({-1})).backward();
//     fsdp->clip_grad_norm_(1.0);                  // the norm over every rank's shards
//     opt.step();                                  // steps this rank's shards only
//   }
//
// The optimizer is made from the module's parameters, before or after
// wrapping: FSDP keeps every parameter's handle (Note [FSDP flat units] in
// flat_param.h) and only moves it between its shard and the gathered tensor,
// so the optimizer, its param groups (built from the full shapes, as
// weight_decay_groups does, before wrapping) and its state see the shard.
//
// Why one wrapper with a wrap policy rather than torch's newer per-module
// fully_shard(): the wrapper is the one place that sees the whole model, so
// it knows the order units run in (for prefetching, and for the check that
// every rank runs the same units), owns the end-of-backward step that waits
// for the last reductions, and its state_dict() is the model's, under the
// model's own keys. A policy names the units (every GPT block, or each
// module over a parameter count, or a list of names); fully_shard() below is
// the same wrapper given the list.
//
// Note [FSDP sharding strategies]
// The ranks of the group are arranged as R replica groups of S ranks each
// (S * R = W); a unit is sharded across the S ranks of a shard group and
// replicated across the R groups:
//   FULL_SHARD     S = W, R = 1: gathered for each forward and again for each
//                  backward, freed after each; memory ~ 1/W of the model
//                  plus the largest unit.
//   SHARD_GRAD_OP  S = W, R = 1: gathered once for forward and kept until its
//                  backward has run (ZeRO-2's memory for the parameters,
//                  one gather fewer per step).
//   NO_SHARD       S = 1, R = W: every rank holds everything and gradients
//                  are all-reduced, as DDP (no gathers at all).
//   HYBRID_SHARD   S = hybrid_shard_size (ranks of one host, typically),
//                  R = W / S: gathers stay within the shard group; gradients
//                  are reduce-scattered in it, then all-reduced across the
//                  groups' ranks that hold the same shard.
// Gradients are averaged over all W ranks in every case, so W ranks with
// B/W samples each take the step one process takes with B samples.
//
// Note [FSDP execution order]
// Unit 0 is the root: the parameters of no wrapped submodule (a GPT's
// embeddings, final norm and tied head). It is gathered when the wrapper's
// forward starts and kept until its last gradient has arrived, since the
// tied head needs it at both ends. Each wrapped unit is gathered by a
// forward pre-hook and resharded by its forward hook (FULL_SHARD), gathered
// again by a backward pre-hook when its output's gradient arrives, and its
// gradients are reduce-scattered, and it is resharded, once all of them
// have been accumulated (post-accumulate hooks counting them); one
// reduction is in flight at a time, overlapping the next unit's backward.
// An end-of-backward callback reduces what never received a gradient
// (unused parameters, as zeros), waits for the last reductions, and hands
// each parameter its gradient shard. The first training forward records the
// order in which units run; prefetching then issues the next unit's
// all-gather (the next in forward, the previous in backward, the last ones
// as backward begins) before the current unit computes, with at most
// `max_gathers_in_flight` units gathered besides the one computing, so that
// communication overlaps computation. Activation checkpointing composes: a
// unit's forward re-run inside backward does not reshard it.
// Every rank must run the same units in the same order. Each unit's shard is
// padded to a size no other unit has (Note [FSDP unit padding]), so a rank
// that skips a unit or runs units in another order calls a collective whose
// element count differs from its peers', and the backend's agreement check
// (Note [Always-on collective agreement]) fails every rank at once; FSDP
// adds the unit's name to the error.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/replica_sync.h"
#include "nn/module.h"

namespace kiln::distributed::fsdp {

class FlatParamUnit;  // flat_param.h

enum class ShardingStrategy { FullShard, ShardGradOp, NoShard, HybridShard };
// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD".
const char* sharding_strategy_name(ShardingStrategy strategy);
// Accepts the names above in either case, and with '-' for '_'
// ("full-shard", as kiln-gpt's --fsdp-strategy); throws listing them.
ShardingStrategy parse_sharding_strategy(std::string_view name);

// Note [FSDP mixed precision] in flat_param.h. Each unset dtype means the
// parameters' own (float32 master shards: no mixed precision).
struct MixedPrecision {
  // What the gathered parameters, and so forward and backward, compute in.
  std::optional<DType> param_dtype;
  // What gradients are reduce-scattered in; defaults to param_dtype.
  std::optional<DType> reduce_dtype;
  // What floating buffers (batch norm statistics) are kept in.
  std::optional<DType> buffer_dtype;
};

// Which submodules become units of their own (Note [FSDP execution order]).
// Called on every submodule, parents before children, with its dotted name
// in the wrapped module; a module inside a unit may be a unit itself (its
// parameters then leave the outer unit). `unwrapped_numel` is the number of
// parameter elements of `module` and its submodules not yet in a unit.
using WrapPolicy = std::function<bool(const nn::Module& module, const std::string& name, int64_t unwrapped_numel)>;
// Every submodule of class T (e.g. GPTBlock): PyTorch's transformer_auto_wrap_policy.
template <class T>
WrapPolicy wrap_by_class() {
  return [](const nn::Module& module, const std::string&, int64_t) { return typeid(module) == typeid(T); };
}
// Any submodule holding at least `min_numel` parameter elements not yet in
// a unit, the deepest first: PyTorch's size_based_auto_wrap_policy. A
// ModuleList or ModuleDict is never a unit: nobody calls it, its owner calls
// its members, so its gathers would never run. (Every unit must be called
// through its operator(), which runs the hooks that gather it.)
WrapPolicy wrap_by_numel(int64_t min_numel);
// The submodules of `root` named (dotted names, as named_modules gives
// them); throws naming a name that is not a submodule of `root`.
WrapPolicy wrap_by_names(const nn::Module& root, std::vector<std::string> names);

struct FSDPOptions {
  // The ranks to shard over; null means the default group (init.h).
  std::shared_ptr<ProcessGroup> group;
  ShardingStrategy strategy = ShardingStrategy::FullShard;
  // Which submodules become units; empty: one unit, the whole model.
  WrapPolicy wrap_policy;
  // Ranks per shard group under HYBRID_SHARD (it must divide the group's
  // size); 0 means LOCAL_WORLD_SIZE, the ranks kiln-run starts per host.
  int hybrid_shard_size = 0;
  // Issue the next unit's all-gather before the current unit computes, in
  // forward and in backward.
  bool forward_prefetch = true;
  bool backward_prefetch = true;
  // At most this many units gathered ahead of the one computing (PyTorch's
  // limit_all_gathers keeps it at 2).
  int max_gathers_in_flight = 2;
  MixedPrecision mixed_precision;
  // Keep the shards, their gradients and so the optimizer state in host
  // memory, gathering to the compute device (that of the module's
  // parameters at construction, or `compute_device`) for each unit.
  bool cpu_offload = false;
  std::optional<Device> compute_device;
  // Broadcast rank 0's parameters and buffers before sharding, so every
  // rank starts from the same model whatever each initialised.
  bool sync_module_states = true;
  // Keep a timeline of gathers and unit computations (events()), to see
  // how communication overlaps computation.
  bool record_events = false;
};

// One moment of FSDP's timeline (FSDPOptions::record_events).
struct FSDPEvent {
  enum class Kind {
    GatherIssued,    // a unit's all-gather was started (by its own hook or a prefetch)
    GatherWaited,    // the unit's parameters are in place (its gather has been waited for)
    ForwardBegin,    // the unit's forward starts computing
    ForwardEnd,
    BackwardBegin,   // the gradient of the unit's output has arrived
    ReduceIssued,    // the unit's gradients have started their reduction
  };
  Kind kind;
  size_t unit;
  bool in_backward;
  double seconds;  // since the FSDP wrapper was made (steady clock)
  bool gather_was_complete = false;  // GatherWaited: the data had arrived before anyone waited
};
const char* fsdp_event_name(FSDPEvent::Kind kind);

// One parameter of the wrapped module as this rank holds it: the elements
// [offset, offset + local_numel) of the parameter flattened in row-major
// order. What sharded state dicts are written from and read into
// (state_dict.h).
struct ParamShard {
  std::string name;     // its name in the wrapped module ("transformer.h.0.attn.c_attn.weight")
  Tensor param;         // the parameter's handle; between steps a 1-d view of local_numel elements
  Shape global_shape;
  DType dtype;          // the master dtype, that of the optimizer's step
  int64_t offset = 0;
  int64_t local_numel = 0;
  // Whether this rank is the one that writes these elements to a sharded
  // checkpoint: true on every rank of the first replica group, false on the
  // ranks that hold a copy of someone else's shard (NO_SHARD, HYBRID_SHARD).
  bool writer = true;
};

// One unit, for reports and tests.
struct UnitInfo {
  std::string name;       // the unit's module ("" for the root)
  int64_t numel = 0;      // parameter elements in the unit
  int64_t shard_numel = 0;  // elements each rank holds (numel / S, padded)
  std::vector<std::string> parameters;
};

class FullyShardedDataParallel : public nn::Module {
 public:
  // Registers `module` as the submodule "module"; shards it across the
  // group's ranks. Collective: every rank of the group constructs its FSDP
  // at the same point, over the same architecture (checked: a rank with
  // other parameter shapes is named). With sync_module_states, rank 0's
  // values are taken.
  explicit FullyShardedDataParallel(std::shared_ptr<nn::Module> module, FSDPOptions options = {});
  // Removes FSDP's hooks. The wrapped module keeps its parameters as they
  // are then, this rank's shard parts: gathering them back would be a
  // collective, which a destructor cannot wait for safely. Take what is
  // needed first (state_dict(), full_state_dict, with_full_parameters).
  ~FullyShardedDataParallel() override;

  Tensor forward(const Tensor& input) override;
  nn::TensorList forward_many(const nn::TensorList& inputs) override;

  // state_dict() of the wrapper is the wrapped model's full state dict,
  // under "module." keys as DDP's: the parameters gathered, so every rank
  // must call it (PyTorch's FULL_STATE_DICT). load_state_dict() takes such a
  // dict (or a plain model's, prefixed "module."); each rank keeps its
  // shard's part, without communication. The wrapped module's own
  // state_dict() shows the parameters as they are: 1-d shard parts.
  // distributed/fsdp/state_dict.h has the rank-0-only and sharded forms.

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& group() { return *group_; }
  // The group a unit is sharded over and the one its shard is replicated
  // over (Note [FSDP sharding strategies]); null when of size 1.
  const std::shared_ptr<ProcessGroup>& shard_group() const { return shard_group_; }
  const std::shared_ptr<ProcessGroup>& replicate_group() const { return replicate_group_; }
  const FSDPOptions& options() const { return options_; }

  // The units, root first, then in the order the policy made them.
  std::vector<UnitInfo> units() const;
  // Every parameter of the wrapped module, in named_parameters() order (a
  // tied parameter once, under its first name).
  std::vector<ParamShard> parameter_shards() const;

  // Clips the gradients in place so that their norm over every rank's
  // shards (the norm of the whole model's gradient) is at most max_norm;
  // returns that norm before clipping. norm_type 2 or infinity (any p > 0
  // works). Collective; call it after backward, before step.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // While a NoSync lives, backward passes keep each unit's full gradient on
  // this rank and add to it, without communication (memory: the unsharded
  // gradients); the first backward after it reduces the sum.
  class NoSync {
   public:
    explicit NoSync(FullyShardedDataParallel& fsdp) : fsdp_(&fsdp) { fsdp_->sync_ = false; }
    ~NoSync() {
      if (fsdp_) fsdp_->sync_ = true;
    }
    NoSync(NoSync&& other) noexcept : fsdp_(other.fsdp_) { other.fsdp_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    FullyShardedDataParallel* fsdp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Gathers every unit's full parameters (collective), runs fn while the
  // wrapped module's parameters have their full shapes and values, then
  // reshards; with `writeback`, what fn wrote into the parameters is kept
  // (each rank keeps its shard's part). PyTorch's summon_full_params.
  void with_full_parameters(const std::function<void()>& fn, bool writeback = true);

  // The timeline recorded so far (empty unless options.record_events), and
  // clearing it.
  const std::vector<FSDPEvent>& events() const { return events_; }
  void clear_events() { events_.clear(); }
  // The order of units in the first training forward (Note [FSDP execution order]).
  const std::vector<size_t>& forward_order() const { return forward_order_; }

 private:
  void make_groups();
  void register_state_dict_hooks();
  void build_units();
  void register_hooks(const std::vector<std::shared_ptr<nn::Module>>& unit_modules);
  void gather(size_t unit);
  void pre_forward(size_t unit);
  void post_forward(size_t unit);
  void begin_backward();
  void pre_backward(size_t unit);
  void after_gradient(size_t unit);
  void reduce(size_t unit);
  void finish_backward();
  void prefetch(size_t unit, bool backward);
  void reshard_all();

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<ProcessGroup> shard_group_;
  std::shared_ptr<ProcessGroup> replicate_group_;
  FSDPOptions options_;
  std::unique_ptr<GradientReductionClaim> claim_;  // its parameters' gradients are reduced here
  std::vector<std::unique_ptr<FlatParamUnit>> units_;  // [0] is the root unit
  std::vector<nn::HookHandle> hooks_;
  std::vector<int64_t> grad_hook_ids_;
  std::vector<Tensor> hooked_params_;
  // The order units ran in during the first training forward, and where
  // this iteration is in it.
  std::vector<size_t> forward_order_;
  bool order_recorded_ = false;
  std::vector<size_t> this_forward_;
  bool has_root_unit_ = false;
  bool in_backward_ = false;
  bool sync_ = true;
  // Per unit, in this backward: whether its backward has begun, how many of
  // its parameters have received their gradient, whether it was reduced.
  std::vector<bool> backward_begun_;
  std::vector<size_t> gradients_arrived_;
  std::vector<size_t> gradients_expected_;
  std::vector<bool> reduced_;
  std::deque<size_t> reducing_;  // units whose reduction is in flight, oldest first
  std::vector<FSDPEvent> events_;
  std::chrono::steady_clock::time_point start_time_;
  void record(FSDPEvent::Kind kind, size_t unit, bool gather_was_complete = false);
};

// The same wrapper, with `modules` (submodules of `root`) as its units:
// PyTorch's fully_shard() applied to each of them and then to the root.
std::shared_ptr<FullyShardedDataParallel> fully_shard(std::shared_ptr<nn::Module> root,
                                                      const std::vector<std::shared_ptr<nn::Module>>& modules,
                                                      FSDPOptions options = {});

}  // namespace kiln::distributed::fsdp
