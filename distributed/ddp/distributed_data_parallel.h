// DistributedDataParallel: one model replica per process, gradients averaged
// over the processes during backward, so that every replica takes the same
// optimizer step.
//
//   distributed::init_process_group("gloo");                // kiln-run sets RANK, WORLD_SIZE, ...
//   auto model = std::make_shared<nn::LeNet>();
//   auto ddp = std::make_shared<distributed::DistributedDataParallel>(model);
//   optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.01));
//   for (auto& [x, y] : loader) {                           // a DistributedSampler shards the data
//     opt.zero_grad();
//     nn::functional::cross_entropy((*ddp)(x), y).backward();   // returns with averaged gradients
//     opt.step();
//   }
//
// With a per-rank batch of B / N, N ranks take the same steps as one process
// with batch B: the mean loss of each rank's half, averaged over ranks, is
// the mean loss of the whole batch, and so are the gradients.
//
// On construction every rank checks that all ranks hold parameters of the
// same shapes and dtypes in the same order (a kiln::Error names the first
// that differs), then takes rank 0's parameters and buffers, so every
// replica starts equal whatever each process initialised. The gradients are
// then averaged by the reducer (reducer.h, Note [DDP buckets]) through a
// communication hook (comm_hook.h) while backward runs.
//
// What else a training script needs is in training_helpers.h: metrics
// averaged over ranks, saving on rank 0, per-rank seeds.
#pragma once

#include <memory>
#include <string>

#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/reducer.h"
#include "distributed/process_group.h"
#include "distributed/replica_sync.h"
#include "nn/module.h"

namespace kiln::distributed {

struct DDPOptions {
  // The group to average over; null means the default group (init.h).
  std::shared_ptr<ProcessGroup> group;
  // Note [DDP buckets]: PyTorch's bucket_cap_mb (25) and its first bucket (1 MiB).
  size_t bucket_cap_bytes = size_t{25} << 20;
  size_t first_bucket_cap_bytes = size_t{1} << 20;
  // Allow parameters that some forward passes do not use (Note [DDP buckets]).
  bool find_unused_parameters = false;
  // Copy rank 0's buffers (batch norm's running statistics) to every rank at
  // the start of each training forward, as PyTorch's broadcast_buffers.
  bool broadcast_buffers = true;
  // How buckets are averaged; null means allreduce_hook().
  std::shared_ptr<CommHook> comm_hook;
};

class DistributedDataParallel : public nn::Module {
 public:
  // Registers `module` as the submodule "module" (so state dicts read
  // "module.conv1.weight", as PyTorch's). Collective: every rank of the
  // group must construct its DDP at the same point.
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {});

  // The wrapped module called through its hooks, (*module)(inputs). In
  // training with gradients enabled it first broadcasts rank 0's buffers
  // (broadcast_buffers) and afterwards arms the reducer for this output's
  // backward, unless inside no_sync(). find_unused_parameters needs a
  // module of one output.
  Tensor forward(const Tensor& input) override;
  nn::TensorList forward_many(const nn::TensorList& inputs) override;

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& group() { return *group_; }

  // While a NoSync lives, backward passes accumulate gradients locally
  // without communication; the first backward after it (of a forward run
  // after it) all-reduces the accumulated sums. Gradient accumulation over
  // k micro-batches: k - 1 forward/backward inside no_sync, then one
  // outside.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp) { ddp_->sync_ = false; }
    ~NoSync() {
      if (ddp_) ddp_->sync_ = true;
    }
    NoSync(NoSync&& other) noexcept : ddp_(other.ddp_) { other.ddp_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Arms the reducer for the next backward, as a forward outside no_sync
  // does, for a caller that runs its forwards under no_sync and learns only
  // later which backward completes the step: a pipeline stage, whose last
  // micro-batch's backward can come after other micro-batches' backwards.
  // `outputs`: that forward's outputs (find_unused_parameters searches from
  // the first).
  void prepare_for_backward(const nn::TensorList& outputs);

  // Replaces the communication hook; call it before a forward.
  void register_comm_hook(std::shared_ptr<CommHook> hook) { reducer_->set_hook(std::move(hook)); }

  const Reducer& reducer() const { return *reducer_; }

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::unique_ptr<GradientReductionClaim> claim_;  // its parameters' gradients are reduced here
  std::unique_ptr<Reducer> reducer_;
  bool sync_ = true;
};

}  // namespace kiln::distributed
