// Pipeline parallelism over a ProcessGroup: each rank holds some stages of a
// model and runs its part of a schedule (schedule.h) every step.
//
//   namespace pp = kiln::distributed::pipeline;
//   // Every rank builds the same model, keeps its stage(s), and the same schedule.
//   auto stages = pp::split_sequential(*model, pp::balance_by_parameters(*model, group->size()));
//   pp::Pipeline pipe(pp::one_f_one_b(group->size(), /*micro_batches=*/8), {{rank, stages[rank]}},
//                     [](const TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); }, group);
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss = pipe.step({x} /* read on stage 0's rank */, y /* read on the last stage's rank */);
//     pipe.clip_grad_norm_(1.0);
//     optimizer.step();  // over pipe.parameters(): this rank's stages
//   }
//
// Note [Pipeline runtime]
// step() splits the batch into the schedule's M micro-batches along dim 0
// (torch.chunk's sizes: ceil(B/M) each, the last smaller; a batch too small to
// give M is an error), then runs this rank's actions in order:
// - F runs the stage module on the micro-batch's inputs with grad on: the
//   data on stage 0, otherwise the previous stage's outputs, received or
//   (same rank) handed over. Received floating-point inputs become leaves
//   that require grad, so each stage's graph ends at its own inputs and the
//   gradient that reaches them is what goes back. On the last stage the loss
//   of the micro-batch is computed there and scaled by its share of the
//   batch (b_i / B): the scaled losses add up to the batch's mean loss, and
//   so do their gradients to the gradient of one step on the whole batch.
// - B backpropagates from the stage's outputs (from the scaled loss on the
//   last stage) with the gradients received for them; the parameters
//   accumulate their .grad over the micro-batches, and the inputs' gradients
//   are what SEND_B sends.
// - I computes only the inputs' gradients and W the parameters' (autograd's
//   backward_input and backward_weight, Note [Split backward] in
//   autograd/engine.h): I skips the weight-gradient GEMMs of linear, matmul
//   and conv2d and keeps what they need; W computes them and accumulates
//   into .grad. Together they do what B does, nothing twice. On stage 0,
//   whose inputs need no gradient, I is empty and W is the whole backward.
// - Sends are posted (isend) and waited for at the end of the step. Every
//   receive whose shapes are known (from an earlier step's handshake) is
//   posted when the step begins, in the order of the rank's list, so that
//   its data arrives while the rank computes; RECV_F and RECV_B only wait
//   for it. (A receive posted only when its action runs costs a round of
//   the backend's threads each time, which measured as most of the bubble.)
//   Activations, gradients and the tied parameters' gradients travel on
//   tags of their own. A step that throws leaves the pipeline unusable.
// The activations of a (stage, micro-batch) are freed after its B or W.
//
// Shapes. A receiver must allocate what it receives, and only stage 0 sees
// the data. So each step stage 0's rank first broadcasts the micro-batch
// sizes to the group, and the first time a stage sends outputs for a
// micro-batch of some size it sends their count, dtypes and shapes ahead (a
// handshake the receiver expects, knowing the size too). Later sends of
// that size are checked against it: a stage whose outputs change shape
// fails naming the stage and the micro-batch, before anything mismatched is
// sent. The last stage's rank checks that its target has the batch's size.
//
// Tied parameters (a GPT's token embedding, used again as its output layer)
// live on two stages. After the last backward their holders exchange
// gradients and each adds them up in stage order, so both hold the same sum,
// and the same optimizer update keeps both copies equal. In one process
// they are one tensor, and nothing is exchanged.
//
// Data parallelism (one DDP group per stage). With R pipelines side by
// side, the ranks holding the same stage in each form a data-parallel
// group, and the stage module may be a DistributedDataParallel over it.
// Its forwards run under no_sync and its last B (or W) of the step arms its
// reducer, so that the gradients summed over the micro-batches are
// averaged over the replicas once, during that backward, overlapping it.
// A stage may instead be a FullyShardedDataParallel over that group: its
// backwards run under its no_sync but the last, which reduce-scatters the
// gradients summed over the micro-batches; clip_grad_norm_ adds its shards'
// squares over its shard group. FSDP cannot split a backward into I and W,
// so zero-bubble refuses FSDP stages.
//
// A stage is any nn::Module: it is called with a TensorList
// (Note [Modules of several tensors]) and returns one. Parameters belong to
// the stage that holds them; every rank's optimizer steps its own.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/pipeline/schedule.h"
#include "distributed/process_group.h"
#include "nn/container.h"
#include "nn/module.h"

namespace kiln::distributed::pipeline {

using nn::TensorList;

// The loss of one micro-batch on the last stage: the stage's outputs and the
// micro-batch's part of the target. Must be a mean over the micro-batch's
// examples (as cross_entropy's default), so that the scaled sum is the batch's mean.
using LossFn = std::function<Tensor(const TensorList& outputs, const Tensor& target)>;

// (stage, state-dict key within that stage's module) of one tensor held by
// several stages.
using TiedParameter = std::vector<std::pair<int, std::string>>;

struct PipelineOptions {
  // Recompute each stage's forward during its backward instead of keeping
  // its activations (autograd/checkpoint.h); only the stage's inputs are kept.
  // Stage 0's floating-point data then count as inputs that require grad;
  // a stage none of whose inputs can (token ids) runs without it.
  bool checkpoint_activations = false;
  // Parameters that several stages hold (gpt::StageSplit::tied).
  std::vector<TiedParameter> tied;
};

// Where the last step's time went on this rank, for measuring the bubble.
struct StepTimes {
  double seconds = 0;          // the whole step()
  double compute_seconds = 0;  // in F, B, I and W actions
  double recv_seconds = 0;     // waiting in receives (the bubble, and transfer time)
  double other_seconds = 0;    // the rest: the step's size broadcast, sends, the tied gradients' exchange
  // Per stage this rank holds, the mean seconds of one action of each
  // compute type in the step (0 for a type it did not run): what
  // simulate(schedule, stage_costs) takes, with the other ranks' stages.
  std::map<int, ActionCosts> stage_costs;
};

class Pipeline {
 public:
  // `stages` maps each stage of schedule.stages_of(group->rank()) to its
  // module. The schedule is validated here (validate()), and must have
  // group->size() ranks. Throws kiln::Error naming what is wrong.
  Pipeline(Schedule schedule, std::map<int, std::shared_ptr<nn::Module>> stages, LossFn loss,
           std::shared_ptr<ProcessGroup> group, PipelineOptions options = {});

  // One step's forward and backward (Note [Pipeline runtime]). `inputs` is
  // stage 0's input list for the whole batch, each tensor (B, ...), read on
  // stage 0's rank only; `target` (B, ...) is read on the last stage's rank
  // only. Gradients are accumulated into the parameters' .grad (zero them
  // first, as with backward()). Returns the batch's mean loss (a scalar, no
  // grad) on the last stage's rank, an undefined tensor elsewhere. Every
  // rank of the group calls it.
  Tensor step(const TensorList& inputs = {}, const Tensor& target = {});

  // The same forward pass without gradients (the schedule's forwards only,
  // under NoGradGuard): the batch's mean loss on the last stage's rank.
  Tensor evaluate(const TensorList& inputs = {}, const Tensor& target = {});

  // torch.nn.utils.clip_grad_norm_ over every stage's parameters on every
  // rank (a tied tensor counted once, an FSDP stage's shards summed over its
  // shard group): the global 2-norm is summed over the group, and every rank scales its gradients by max_norm / (norm + 1e-6)
  // when that is below 1. Returns the norm before clipping. Every rank calls it.
  double clip_grad_norm_(double max_norm);

  // The last step()'s times on this rank.
  const StepTimes& last_step_times() const { return times_; }

  // This rank's parameters, each once (for the optimizer).
  std::vector<Tensor> parameters() const;
  const Schedule& schedule() const { return schedule_; }
  int rank() const { return rank_; }
  bool holds_first_stage() const { return schedule_.stage_rank.front() == rank_; }
  bool holds_last_stage() const { return schedule_.stage_rank.back() == rank_; }

 private:
  struct MicroBatchState;  // one (stage, micro-batch)'s tensors, pipeline.cpp
  struct Run;              // one step's state, pipeline.cpp

  Tensor run(const TensorList& inputs, const Tensor& target, bool train);
  void post_receives(Run& run);
  void run_action(Run& run, const Action& action);
  void exchange_tied_gradients();

  Schedule schedule_;
  std::map<int, std::shared_ptr<nn::Module>> stages_;
  LossFn loss_;
  std::shared_ptr<ProcessGroup> group_;
  PipelineOptions options_;
  int rank_;
  // The output signatures handed over so far: (stage, micro-batch size) ->
  // the dtypes and shapes of the stage's outputs (Note [Pipeline runtime]).
  std::map<std::pair<int, int64_t>, std::vector<std::pair<DType, Shape>>> handshakes_;
  StepTimes times_;
  std::map<int, size_t> last_gradient_action_;  // stage -> index of its last B or W in this rank's list
};

// ---- splitting a model into stages ----

// The modules of `model` cut into consecutive stages: balance[i] modules in
// stage i (each >= 1, summing to model.size()). Each stage is a Sequential
// holding the same module objects (not copies), registered under their
// names in `model` ("3", or "conv1" in a named Sequential), so a stage's
// state-dict keys are the model's. A module held twice is refused.
std::vector<std::shared_ptr<nn::Module>> split_sequential(const nn::Sequential& model,
                                                          const std::vector<int64_t>& balance);

// Balances for split_sequential: consecutive runs of modules whose costs add
// up as evenly as possible: the largest stage cost is the smallest possible
// and, among cuts that reach it, the later stages take the extra modules
// (free ones such as activations). costs.size() modules, num_stages <= costs.size().
std::vector<int64_t> balance_by_costs(const std::vector<double>& costs, int num_stages);
// Cost = each module's parameter count (modules without parameters count 0).
std::vector<int64_t> balance_by_parameters(const nn::Sequential& model, int num_stages);
// Cost = each module's measured forward and backward time on `sample`
// (the model's input for one micro-batch), the median of `repeats` runs.
std::vector<int64_t> balance_by_time(nn::Sequential& model, const Tensor& sample, int num_stages, int repeats = 3);

}  // namespace kiln::distributed::pipeline
