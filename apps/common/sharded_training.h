// What a training app does differently when its model is sharded over the
// processes with FullyShardedDataParallel (kiln-lenet --fsdp, kiln-gpt train
// --fsdp), and the per-rank memory lines that --ddp and --fsdp runs print.
//
// Note [Trainers under FSDP]
// --fsdp trains as --ddp does (the same processes under kiln-run, the same
// shares of the data, seeds, metrics summed over the ranks and agreement
// to stop: Note [kiln-lenet with DDP], Note [kiln-gpt across processes]),
// with the model wrapped in FullyShardedDataParallel instead of
// DistributedDataParallel, so that each rank holds 1/N of the parameters,
// gradients and optimizer state (--fsdp-strategy picks the sharding, Note
// [FSDP sharding strategies]). What changes:
// - The order of set-up. The model is built, the optimizer made over its
//   parameters (their full shapes, which weight_decay_groups sorts by) and
//   a --resume checkpoint loaded into both, all before wrapping; FSDP then
//   shards the model in place, keeping every parameter's handle, and
//   shard_optimizer_state cuts the loaded optimizer state down to this
//   rank's shards.
// - Checkpoints keep the trainers' single-file format (optim/
//   training_checkpoint.h): full_state_dict and full_optimizer_state_dict
//   (distributed/fsdp/state_dict.h) gather the model and the optimizer
//   state to rank 0, every rank taking part, and rank 0 writes the file a
//   one-process run would write. So an --fsdp checkpoint resumes under
//   --ddp, in one process, or under --fsdp on another number of processes,
//   and kiln-gpt sample reads it. The price is a full copy of the model
//   and its optimizer state on rank 0 while it saves; a model too large
//   for that needs sharded checkpoints (save_sharded_checkpoint, each rank
//   writing its own part), which the trainers do not write yet.
// - Every forward goes through the wrapper, evaluations too, and since a
//   unit's all-gather is a collective, every rank runs the model as often
//   as the others: a rank whose share of an evaluation is shorter runs it
//   on a blank input and counts nothing.
// - Gradients are clipped by FullyShardedDataParallel::clip_grad_norm_, the
//   norm over every rank's shards.
// - --amp on CUDA is refused: GradScaler skips a step when the gradients it
//   sees are not finite, and under FSDP each rank sees only its shards, so
//   the ranks could disagree on which steps to skip. (--amp on the CPU,
//   bfloat16 without loss scaling, works.)
// - The model a run returns (TrainingResult::model) is a plain module with
//   the gathered parameters, as a one-process run returns.
#pragma once

#include <map>
#include <ostream>
#include <string>

#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "tensor/device.h"

namespace kiln::apps {

// The checks of --fsdp's flags both trainers make: --fsdp-strategy names a
// strategy (parse_sharding_strategy's spellings) and is given only with
// --fsdp; --fsdp with --amp on a CUDA --device is refused (Note [Trainers
// under FSDP]). Throws kiln::Error naming the flags.
void check_fsdp_flags(bool fsdp, const std::string& strategy, bool amp, const std::string& device);

// Replaces the optimizer's state, loaded over the full parameters before
// `fsdp` sharded them, by this rank's part of it: each per-element entry
// (a tensor of its parameter's full shape) becomes the 1-d run of elements
// this rank's shard holds, single numbers (Adam's step) stay. No
// collectives. An optimizer without state (a fresh run) is left as it is.
// Throws for a 0-dim parameter (whose per-element state cannot be told from
// a step count by shape).
void shard_optimizer_state(distributed::fsdp::FullyShardedDataParallel& fsdp, optim::Optimizer& optimizer);

// Writes the training checkpoint a one-process run would write to `path`
// (optim::save_training_checkpoint), from the model and optimizer state
// gathered to rank 0. Collective over fsdp.group(): every rank calls it,
// rank 0 writes the file (with a SavingCheckpoint guard, apps/common/interrupt.h).
void save_gathered_training_checkpoint(const std::string& path, distributed::fsdp::FullyShardedDataParallel& fsdp,
                                       const optim::Optimizer& optimizer, optim::LRScheduler* scheduler, int64_t step,
                                       const std::map<std::string, std::string>& extra, optim::GradScaler* grad_scaler);

// Loads the wrapped module's full state dict into `plain`, a module of the
// same architecture outside FSDP, on every rank. Collective.
void load_gathered_state(distributed::fsdp::FullyShardedDataParallel& fsdp, nn::Module& plain);

// One line of what this rank holds (distributed/memory_report.h: the bytes
// of the parameters, their gradients and the optimizer's state, and the
// allocator's current and peak bytes on `device`):
//   "rank 1 memory at the start: params 120.0 KiB, grads 0 B, optimizer 0 B, allocated 1.2 MiB, peak 3.4 MiB (cpu)"
// `when` is "at the start" or "at the end".
void print_memory_line(std::ostream& out, int rank, const std::string& when, const nn::Module& module,
                       const optim::Optimizer* optimizer, Device device);
// Restarts the allocator's peak on `device`, so that the line printed at
// the end of training shows the peak of training alone.
void reset_peak_memory(Device device);

}  // namespace kiln::apps
