// SyncBatchNorm: batch norm whose statistics are taken over the whole batch
// of a process group, as torch.nn.SyncBatchNorm.
//
//   auto model = distributed::convert_sync_batchnorm(make_resnet());   // every BatchNorm -> SyncBatchNorm
//   auto ddp = std::make_shared<distributed::DistributedDataParallel>(model);
//
// With data parallelism each rank sees only its shard of the batch; a plain
// BatchNorm would normalise with that shard's statistics, which for small
// per-rank batches are noisy and differ from rank to rank. SyncBatchNorm
// normalises every rank's rows with the mean and variance of all ranks' rows
// together, so the group computes what one process would on the whole batch:
// the same outputs, input gradients and running statistics.
//
// Note [SyncBatchNorm statistics]
// Each rank reduces its shard to (count, mean, M2) per channel, M2 being the
// sum of squared deviations from the shard's mean (two passes over the
// data, as Note [Normalization statistics] in tensor/norm.h asks). One
// all_gather of these 2C + 1 numbers, in float64, gives every rank all the
// shards' summaries, which it combines as Chan et al.'s parallel variance:
//   count = sum_r count_r
//   mean  = sum_r count_r * mean_r / count
//   M2    = sum_r (M2_r + count_r * (mean_r - mean)^2)
//   var   = M2 / count            (biased: normalises the batch)
//   var_u = M2 / (count - 1)      (unbiased: updates running_var)
// An all_reduce of per-channel sums of x and x^2 would need a single
// collective too, but E[x^2] - E[x]^2 cancels catastrophically when the mean
// is large against the spread; gathering W * (2C + 1) numbers costs no more
// in practice. A rank with an empty shard sends count 0 and contributes
// nothing. The running statistics are then updated from (mean, var_u) with
// BatchNorm's rule, identically on every rank.
//
// Note [SyncBatchNorm gradients and DDP]
// Let J = sum_r L_r be the sum of every rank's loss. Each rank's outputs
// depend on all ranks' inputs through the shared statistics, so dJ/dx for
// this rank's rows needs two per-channel sums over the whole group's batch
// (M values per channel), which backward all-reduces:
//   grad_input = w * invstd * (dy - sum(dy) / M - xhat * sum(dy * xhat) / M)
// That is the exact dJ/dx_r. grad_weight = sum(dy * xhat) and
// grad_bias = sum(dy) are taken over this rank's rows only: the share of
// dJ/dw that flows through this rank's outputs, which sums over ranks to
// dJ/dw. Every other parameter ends backward holding its local share of
// dJ/dtheta in the same way (one upstream of SyncBatchNorm too, since its
// grad_input is exact), so DDP's average over the W ranks gives every
// parameter the same (1 / W) dJ/dtheta. With each rank's loss the mean over
// its B / W rows, (1 / W) J is the mean loss over the whole batch of B, and
// DDP with SyncBatchNorm takes exactly the single-process step. (With unequal
// shards each rank's mean counts equally, as for any DDP model.) All-reducing
// grad_weight in backward as well would be wrong under DDP: the average of W
// copies of the full dJ/dw is W times the share every other parameter gets.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "distributed/process_group.h"
#include "nn/module.h"
#include "nn/normalization.h"

namespace kiln::distributed {

// Parameters "weight" (ones) and "bias" (zeros), (num_features), when affine;
// buffers "running_mean", "running_var", "num_batches_tracked" when
// track_running_stats: the state dict of nn::BatchNorm, so the two load each
// other's checkpoints.
//
// Accepts inputs (N, C, *) of any rank >= 2 (BatchNorm1d's and 2d's alike);
// N may differ between ranks and may be 0 on some, as long as the group's
// batch has more than one value per channel.
//
// In training, forward is collective over the group (every rank must call it
// in step, and backward too when the input needs a gradient): statistics as
// Note [SyncBatchNorm statistics], gradients as Note [SyncBatchNorm gradients
// and DDP]. It is exactly nn::BatchNorm, with no communication, in eval mode
// (running statistics, or the local batch's without them, as torch), when
// the group has one process, and when no group is given and no default group
// exists.
class SyncBatchNorm : public nn::BatchNorm {
 public:
  // `group` null: the default group (init.h), looked up at each forward.
  explicit SyncBatchNorm(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                         bool affine = true, bool track_running_stats = true,
                         std::shared_ptr<ProcessGroup> group = nullptr);
  // Takes over `batch_norm`'s settings, training flag and its parameters and
  // buffers: the same tensors, not copies, so an optimizer built on them
  // keeps working.
  SyncBatchNorm(const nn::BatchNorm& batch_norm, std::shared_ptr<ProcessGroup> group);

  Tensor forward(const Tensor& input) override;

  // The group given to the constructor (null: the default group).
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }

 protected:
  // (N, C, *) of any rank >= 2.
  void check_input_dim(const Tensor& input) const override;

 private:
  // The group this forward synchronises over, or null when the statistics
  // are this process's own (see the class comment).
  std::shared_ptr<ProcessGroup> sync_group() const;

  std::shared_ptr<ProcessGroup> group_;
};

// Returns `module` with every nn::BatchNorm in its tree (BatchNorm1d,
// BatchNorm2d) replaced by a SyncBatchNorm over `group` (null: the default
// group) that takes over its tensors and training flag; as torch, assign the
// result: `model = convert_sync_batchnorm(model)`. A BatchNorm `module` comes
// back as a new SyncBatchNorm. Other modules are changed in place with
// Module::replace_module, except Sequential, ModuleList and ModuleDict
// holding a BatchNorm somewhere below, which keep their own lists of modules
// and are rebuilt (same names, same training flag; forward hooks on them and
// on the replaced BatchNorms are not carried over).
//
// A module whose forward calls a BatchNorm through a member handle
// (`bn_` set from register_module) would keep calling the old layer, which
// convert_sync_batchnorm cannot update; so each replaced BatchNorm throws a
// kiln::Error naming its path if it is ever called again, rather than
// silently training with per-rank statistics. Such a module must read its
// layers back from the registry, e.g. with get_submodule("bn").
std::shared_ptr<nn::Module> convert_sync_batchnorm(const std::shared_ptr<nn::Module>& module,
                                                   std::shared_ptr<ProcessGroup> group = nullptr);

}  // namespace kiln::distributed
