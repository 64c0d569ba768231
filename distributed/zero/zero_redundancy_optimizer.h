// ZeroRedundancyOptimizer: data parallelism in which each of N ranks keeps
// the optimizer state of only its 1/N of the parameters (ZeRO stage 1) and,
// at stage 2, only the averaged gradients of that 1/N too, as PyTorch's
// ZeroRedundancyOptimizer and DeepSpeed's ZeRO-1 and ZeRO-2.
//
// Stage 1, beside DDP (which averages every gradient):
//   auto ddp = std::make_shared<DistributedDataParallel>(model);
//   ZeroRedundancyOptimizer opt(ddp->parameters(), optimizer_factory<optim::Adam>(optim::AdamOptions(1e-3)));
//   for (...) { opt.zero_grad(); F::cross_entropy((*ddp)(x), y).backward(); opt.step(); }
//
// Stage 2, instead of DDP (ZeRO reduces the gradients itself):
//   ZeroRedundancyOptimizer opt(model->parameters(), optimizer_factory<optim::AdamW>(optim::AdamWOptions()),
//                               ZeroOptions{.stage = 2});
//   for (...) { opt.zero_grad(); F::cross_entropy(model->forward(x), y).backward(); opt.step(); }
//
// Note [ZeRO stages]
// With Adam in float32, a model of P elements costs each DDP rank 4P bytes
// of parameters, 4P of gradients and 8P of optimizer state (exp_avg,
// exp_avg_sq), every byte of it the same on every rank. ZeRO (Rajbhandari et
// al., 2020) keeps one copy of what need not be replicated:
//                parameters  gradients        optimizer state
//   DDP          4P          4P               8P
//   stage 1      4P          4P               8P / N
//   stage 2      4P          4P / N + buckets 8P / N
//   stage 3      4P / N + the unit in use ...  (that is FSDP: distributed/fsdp/)
//
// Partition. Each rank owns whole parameters, so that any Kiln optimizer
// (SGD, Adam, AdamW) steps them unchanged, with their shapes, and the state
// dict stays per parameter: the optimizer the factory builds on rank r sees
// only rank r's parameters, in the caller's param groups with their
// hyperparameters (a group may be empty on a rank). The parameters, in the
// order given (group 0's, then group 1's, ...), are cut into N contiguous
// runs, one per rank, none empty, with the largest run as small as any such
// cut allows (zero_partition below). Contiguous, rather than PyTorch's
// greedy largest-first assignment, so that at stage 2 each rank's gradients
// are one stretch of the backward order and each reduction has one
// destination; with whole parameters the largest run is at least the
// largest parameter either way.
//
// Stage 1. Something else has averaged the gradients (DDP). step() runs the
// local optimizer, which updates the owned parameters and keeps their state,
// then every owner broadcasts its updated parameters, in buckets, so all
// replicas are equal again. The other gradients are computed and averaged
// as in DDP and left unused.
//
// Stage 2. A DDP communication hook cannot save gradient memory: DDP's
// reducer keeps every gradient in its bucket buffers between steps (Note
// [Gradient as bucket view]). So stage 2 replaces DDP and reduces the
// gradients itself (and, without DDP, leaves buffers such as batch norm's
// running statistics to each rank: SyncBatchNorm keeps them equal):
// - The parameters that require grad are packed into buckets in reverse
//   order (for model->parameters(), the order backward produces gradients
//   in, Note [DDP buckets]), each bucket inside one rank's run, of one dtype
//   and device, and at most bucket_cap_bytes.
// - A hook before each parameter's gradient is accumulated moves any
//   gradient it already holds aside (an owned one stays in the owner's
//   gradient buffer and is added to afterwards), so that backward leaves
//   this backward's local gradient in .grad(). A hook right after copies it
//   into its bucket's buffer, made for this backward, and drops it.
// - When a bucket is complete it is reduced (ReduceOp::Avg) to its owner,
//   buckets in index order on every rank. The owner adds the average to its
//   persistent gradient buffer (1/N of the model), and each owned
//   parameter's .grad() becomes a view of it; the others' bucket buffers are
//   freed. A sequence of reduces, one per bucket, each landing on the rank
//   that owns the bucket: a reduce-scatter of the whole gradient whose
//   chunks are the ranks' runs, moving about as many bytes, but started
//   during backward and never holding the whole gradient. (A
//   reduce_scatter_tensor needs equal chunks, which whole parameters do not
//   make: that is FSDP's flat padded buffer.)
// - At most reductions_in_flight buckets are in flight; launching one more
//   first waits for the oldest, which bounds the gradient memory of a
//   backward by that many buckets beyond the owned 1/N. An end-of-backward
//   callback waits for the rest, so backward() returns with every owned
//   gradient averaged and no other gradient kept.
// - Gradient accumulation: each backward reduces its gradients and the owner
//   adds them up (as DeepSpeed does); there is no no_sync, whose point would
//   be to keep the full gradients.
// - Every parameter that requires grad must get a gradient in every
//   backward; the end-of-backward callback names those that did not.
//
// Both stages average the same gradients as DDP and apply the same
// per-parameter update as one optimizer over every parameter, so N ranks
// with batch B / N take the steps one process takes with batch B, to
// rounding (tests/distributed/zero_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/replica_sync.h"
#include "optim/optimizer.h"
#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::distributed {

struct ZeroOptions {
  // The ranks to shard over; null means the default group (init.h).
  std::shared_ptr<ProcessGroup> group;
  // 1: optimizer state sharded; 2: gradients too (Note [ZeRO stages]).
  int stage = 1;
  // Bucket size for stage 2's gradient reductions and for the broadcasts of
  // updated parameters (both stages); a parameter larger than this gets a
  // bucket of its own.
  size_t bucket_cap_bytes = size_t{25} << 20;
  // Stage 2: buckets reduced concurrently during backward (at least 1), and
  // parameter buckets broadcast concurrently in step().
  int reductions_in_flight = 2;
  // On construction, copy rank 0's parameters to every rank. DDP has done so
  // already at stage 1; stage 2 runs without DDP and needs it.
  bool broadcast_from_rank0 = true;
};

// Builds the optimizer of one rank's parameters: `groups` are the caller's
// param groups, each with its options, holding only that rank's parameters.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<optim::ParamGroup>& groups)>;

// A factory for optimizer O with default options `options`:
//   optimizer_factory<optim::SGD>(optim::SGDOptions(0.1).momentum(0.9))
template <class O, class Options>
OptimizerFactory optimizer_factory(Options options) {
  return [options](const std::vector<optim::ParamGroup>& groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<O>(groups, options);
  };
}

// The owner of each of `numels.size()` parameters of these element counts,
// taken in order: `world` contiguous non-empty runs (rank r owns run r)
// whose largest element count is the smallest possible; each run is filled
// as far as that bound allows, front to back, keeping one parameter for
// each later run. Requires world >= 1 and at least `world` parameters.
//   zero_partition({4, 1, 1, 2}, 2) == {0, 1, 1, 1}   // runs of 4 and 4
std::vector<int> zero_partition(const std::vector<int64_t>& numels, int world);

class ZeroRedundancyOptimizer {
 public:
  // Collective: every rank of the group constructs it at the same point,
  // over the same parameters in the same groups (replica_sync.h checks
  // their dtypes and shapes: a rank that differs is named in a kiln::Error
  // on every rank), and takes rank 0's values. Throws for an empty
  // list, fewer parameters than ranks, a parameter listed twice, undefined,
  // not floating point or not a leaf, an unknown stage, or a factory that
  // returns an optimizer over other groups.
  ZeroRedundancyOptimizer(const std::vector<Tensor>& params, OptimizerFactory make_optimizer, ZeroOptions options = {});
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, OptimizerFactory make_optimizer,
                          ZeroOptions options = {});
  // Removes stage 2's gradient hooks.
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // Steps the owned parameters with the local optimizer, then broadcasts
  // each rank's updated parameters from it. Collective.
  void step();
  // As Optimizer::zero_grad, over every parameter (owned or not).
  void zero_grad(bool set_to_none = true);
  // Scales the owned gradients so that the norm of the whole model's
  // gradient, summed over every rank's owned part, is at most max_norm, as
  // optim::clip_grad_norm_ over all parameters in one process would; returns
  // that norm before clipping. Collective; call it between backward and
  // step. At stage 1 the gradients of parameters this rank does not own are
  // left as they are: step() does not use them.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // ---- param groups and hyperparameters ----
  // As the caller gave them: every rank's parameters.
  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  double lr(size_t group) const;
  void set_lr(size_t group, double lr);
  // The optimizer of this rank's parameters. It has the caller's param
  // groups (with only the owned parameters), so a scheduler attached to it
  // sets the lrs here, and runs the same on every rank:
  //   optim::CosineAnnealingLR schedule(zero.local_optimizer(), /*T_max=*/1000);
  optim::Optimizer& local_optimizer() { return *local_; }
  const optim::Optimizer& local_optimizer() const { return *local_; }

  // ---- the partition (Note [ZeRO stages]) ----
  int stage() const { return options_.stage; }
  ProcessGroup& group() { return *group_; }
  // The rank owning each parameter, numbered across the groups in order, as
  // state dicts number them.
  const std::vector<int>& owners() const { return owner_; }
  // Parameter elements each rank owns.
  std::vector<int64_t> partition_numels() const;
  // The buckets (Note [ZeRO stages]): bucket b's parameter indices, in the
  // order they sit in its buffers. Stage 2 reduces gradients by them, both
  // stages broadcast updated parameters by them. For tests and reports.
  std::vector<std::vector<size_t>> bucket_parameters() const;

  // ---- state dict (Note [Optimizer state dict]) ----
  // Collective: sends every rank's optimizer state to `to_rank`, where
  // state_dict() then returns the whole optimizer's state dict, numbered as
  // that of one optimizer of the same kind over every parameter (so one
  // process can load it into one), and a snapshot: later steps do not change
  // it. The other ranks only send.
  void consolidate_state_dict(int to_rank = 0);
  // The dict consolidated to this rank by the last consolidate_state_dict;
  // throws on another rank, before any consolidation, or after a step or
  // load since.
  const TensorDict& state_dict() const;
  // Loads a whole optimizer's state dict (a consolidated one, or that of one
  // optimizer of the same kind over the same parameters): every rank takes
  // the hyperparameters and the state of the parameters it owns, with the
  // checks of Optimizer::load_state_dict. Collective: if any rank's part is
  // refused, every rank throws and keeps its previous state.
  void load_state_dict(const TensorDict& dict);

 private:
  struct Bucket {
    int owner = 0;
    std::vector<size_t> params;  // indices into params_, in the order they sit in the buffers
    int64_t numel = 0;
    DType dtype = DType::Float32;
    Device device;
    Tensor owned;        // stage 2, on the owner: the averaged gradients, between backward passes too
    Tensor buffer;       // stage 2: this backward's local gradients, until reduced
    size_t pending = 0;  // gradients not yet in `buffer` this backward
    WorkPtr work;        // the reduction in flight
  };

  void check_parameters() const;
  void build_local_optimizer(const OptimizerFactory& make_optimizer);
  void build_buckets();
  void install_gradient_hooks();
  void broadcast_parameters();
  // Stage 2's hooks and end-of-backward callback (Note [ZeRO stages]).
  void before_accumulate(size_t index);
  void after_accumulate(size_t index);
  void launch_ready_buckets();
  void finish_bucket(size_t bucket);
  void finish_backward();
  // "parameter 3 (group 1, float64 [84, 120])".
  std::string describe_param(size_t index) const;
  bool owns(size_t index) const { return owner_[index] == group_->rank(); }

  std::shared_ptr<ProcessGroup> group_;
  ZeroOptions options_;
  std::unique_ptr<GradientReductionClaim> claim_;  // stage 2: its parameters' gradients are reduced here
  std::vector<optim::ParamGroup> groups_;
  std::vector<Tensor> params_;        // every group's, in order
  std::vector<size_t> group_of_;      // parameter -> its group
  std::vector<int> owner_;            // parameter -> owning rank
  std::vector<int64_t> local_index_;  // parameter -> its index in local_'s numbering; -1 if not owned
  std::unique_ptr<optim::Optimizer> local_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> bucket_of_;      // parameter -> bucket; -1 for one without (not requiring grad)
  std::vector<int64_t> bucket_offset_;  // parameter -> its first element in its bucket's buffers
  std::vector<Tensor> owned_views_;     // stage 2, owned parameters: its gradient's view of its bucket's `owned`
  std::vector<std::pair<size_t, int64_t>> hook_handles_;  // (parameter, handle)

  // Stage 2: the current backward.
  bool in_backward_ = false;
  std::vector<bool> ready_;       // per parameter
  std::vector<bool> accumulate_;  // per owned parameter: add to the gradient it held before
  size_t next_launch_ = 0;        // the next bucket to reduce
  size_t next_finish_ = 0;        // the oldest bucket still in flight

  // What consolidate_state_dict() gathered here; cleared by step() and load.
  std::optional<TensorDict> consolidated_;
  int consolidated_to_ = -1;
};

}  // namespace kiln::distributed
