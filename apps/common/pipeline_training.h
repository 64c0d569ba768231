// What a training app does differently when its model is cut into pipeline
// stages over the processes kiln-run starts (kiln-gpt train --pp N,
// kiln-lenet --pp N): the checks of the flags, the micro-batch count, the
// schedule evaluations run, the loss carried from the last stage's rank to
// rank 0, and the stages' weights gathered into one model.
//
// Note [Trainers under pipeline parallelism]
// `kiln-run --nproc-per-node N kiln-gpt train --pp N` starts N processes;
// each joins the default process group (as --ddp does, data_parallel_run.h)
// and must find exactly N processes there. Then:
// - Every rank builds the same whole model from the same seed, cuts it into
//   the schedule's stages (distributed/pipeline/pipeline.h) and keeps only
//   its own; the optimizer steps that rank's parameters (grouped for weight
//   decay as the one-process run groups them), gradients are clipped by
//   Pipeline::clip_grad_norm_, the norm over every stage.
// - Every rank reads the same batches, the whole batch of a one-process run
//   (stage 0's rank uses the inputs, the last stage's rank the targets), so
//   N processes take the one-process run's steps: --batch-size is the
//   whole batch, split into --micro-batches M inside the pipeline. The
//   parameters then equal the one-process run's within float32 rounding
//   (the loss of a batch is summed from its micro-batches').
// - The loss exists on the last stage's rank; after each step it is
//   broadcast from there, so rank 0 prints, logs and plots as usual.
// - kiln-gpt evaluates through a second pipeline over the same stages whose
//   schedule (evaluation_schedule) takes the whole evaluation batch as one
//   micro-batch: any batch size works (a short last batch too), and the loss
//   is the one-process run's bit for bit. kiln-lenet needs predictions for
//   its accuracy and per-class table, which a pipeline's loss does not
//   give: it gathers the stages' weights into the whole model every rank
//   keeps (gather_stages) and each rank evaluates its share of the test set
//   as under --ddp.
// - A training batch too small for the schedule's micro-batches (an
//   epoch's last in kiln-lenet) goes through a fill-drain pipeline
//   (fill_drain_schedule) over the same stages with as many as it gives.
// - Dropout draws from the default generator, seeded alike on every rank;
//   its masks differ from a one-process run's (each rank draws for its
//   own stages only), so only runs without dropout compare exactly.
// - At the end the stages' weights are gathered (a broadcast from each
//   stage's rank) into a whole model on every rank: what the run returns.
// Not yet: checkpoints (--save, --resume), --amp, CUDA devices and
// combining --pp with --ddp or --fsdp are refused naming the flags.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "distributed/pipeline/pipeline.h"
#include "nn/module.h"

namespace CLI {
class App;
}  // namespace CLI

namespace kiln::apps {

// A trainer's pipeline flags: --pp N (0: off), --schedule / --pp-schedule,
// --micro-batches M (0: the default), --virtual-stages V (0: the default).
struct PipelineFlags {
  int64_t pp = 0;
  std::string schedule = "1f1b";
  int64_t micro_batches = 0;
  int64_t virtual_stages = 0;
};

// Where a trainer keeps its pipeline flags.
struct PipelineFlagTargets {
  std::string& schedule;
  int64_t& micro_batches;
  int64_t& virtual_stages;
};

// Registers the schedule's flag (`schedule_flag`: "--schedule", or
// "--pp-schedule" where --schedule means something else), --micro-batches
// and --virtual-stages on `app`, writing into `targets`. --pp itself is the
// trainer's, whose help says how it cuts its model.
//   add_pipeline_flags(app, {o.pp_schedule, o.micro_batches, o.virtual_stages}, "--schedule");
void add_pipeline_flags(CLI::App& app, const PipelineFlagTargets& targets, const std::string& schedule_flag);

// The checks both trainers make; `schedule_flag` is how the app spells the
// schedule's flag ("--schedule", "--pp-schedule"), `batch_size` the batch the
// pipeline splits. Throws kiln::Error naming the flags: --pp negative;
// the others given without --pp; an unknown schedule; --virtual-stages
// other than interleaved's (>= 2); a batch that cannot give M
// micro-batches; a schedule that refuses N, M and V (interleaved wants M a
// multiple of N). The flags excluded by --pp are the trainer's to refuse.
void check_pipeline_flags(const PipelineFlags& flags, const std::string& schedule_flag, int64_t batch_size);

// Stages per rank: --virtual-stages, else 2 for interleaved and 1 otherwise.
int virtual_stages(const PipelineFlags& flags);

// --micro-batches, else the default: the most micro-batches up to 2N (N
// = --pp) that the batch splits into (torch.chunk's sizes, none empty) and,
// for interleaved, a multiple of N; 0 when none fits.
int64_t micro_batches(const PipelineFlags& flags, int64_t batch_size);

// The schedule of the flags: make_schedule(schedule, pp, micro_batches(),
// virtual_stages()).
distributed::pipeline::Schedule training_schedule(const PipelineFlags& flags, int64_t batch_size);

// A schedule over `training`'s stages and ranks with `micro_batches`
// micro-batches: each rank forwards every micro-batch through its stages in
// order, then backwards them in reverse (GPipe's fill and drain, for any
// stage layout, interleaved included). For a batch too small for the
// training schedule's micro-batches (the last of an epoch), and, with one
// micro-batch, for evaluations. Validated here.
distributed::pipeline::Schedule fill_drain_schedule(const distributed::pipeline::Schedule& training, int micro_batches);
// fill_drain_schedule(training, 1): what Pipeline::evaluate runs is its
// forwards, and it takes any batch of at least one example whole.
distributed::pipeline::Schedule evaluation_schedule(const distributed::pipeline::Schedule& training);

// The most micro-batches up to `at_most` that `batch` examples split into
// with none empty (1 for a batch of one).
int64_t micro_batches_for(int64_t batch, int64_t at_most);

// Throws unless the process group has exactly --pp processes, naming both
// and the kiln-run flag that gives them.
void check_pipeline_world_size(int64_t pp, int world_size, const std::string& program);

// The last stage's loss on every rank: `loss` (a scalar on the last stage's
// rank, undefined elsewhere) broadcast from there as a float64 scalar on
// the CPU. Collective.
Tensor loss_from_last_stage(const Tensor& loss, const distributed::pipeline::Pipeline& pipe,
                            distributed::ProcessGroup& group);

// Copies every stage's state into `whole_stages`, the same split of a
// whole model (the same modules' keys): each stage's tensors are broadcast
// from the rank that holds it, after that rank has copied its own stage's
// values in. Every rank ends with the whole trained model. `whole_stages`
// may be the split the pipeline trains (each rank keeping the whole model
// it split): the other ranks' stages are then brought up to date in place.
// `mine` is this rank's stages (stage index -> module). Collective.
void gather_stages(const std::map<int, std::shared_ptr<nn::Module>>& mine,
                   const std::vector<std::shared_ptr<nn::Module>>& whole_stages,
                   const distributed::pipeline::Schedule& schedule, distributed::ProcessGroup& group);

}  // namespace kiln::apps
