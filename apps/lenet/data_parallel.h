// kiln-lenet --ddp and --fsdp: the pieces of a run that change when several
// processes train one model.
//
// Note [kiln-lenet with DDP]
// `kiln-run --nproc-per-node 2 build/apps/lenet/kiln-lenet --ddp` starts two
// processes; each joins the default process group (init_process_group with
// env://, from the variables kiln-run sets), wraps its LeNet in
// DistributedDataParallel and trains on its share of each epoch (--fsdp
// wraps it in FullyShardedDataParallel instead, with the layers of at least
// kFsdpUnitNumel parameters as units of their own, and is otherwise the
// same: Note [Trainers under FSDP] in apps/common/sharded_training.h):
// - --batch-size is per process; the global batch is batch size x world
//   size. A DistributedSampler with the run's seed gives rank r the
//   positions r, r + N, ... of the epoch's permutation, so one step of N
//   ranks covers the same images as one step of a single process with the
//   global batch (the order RandomSampler draws with the same seed).
// - The test set is split the same way without repeats (rank r evaluates
//   images r, r + N, ...), and the loss sum and the per-class counts are
//   summed over the ranks: every rank ends with the whole test set's figures.
// - Rank 0 alone prints, logs, plots and writes checkpoints; every rank
//   reads the same checkpoint to resume.
// - Ctrl-C (which kiln-run passes to every process) reaches the ranks at
//   different steps; they agree to stop through an all_reduce every
//   kStopCheckSteps steps and at the end of each epoch, so that none is
//   left waiting in a collective the others never start.
// --accum-steps k (with or without --ddp) makes each optimizer step from k
// batches, each loss divided by k; under DDP the first k - 1 run inside
// no_sync(), so only the last one communicates.
//
// Note [Resuming on another world size]
// N processes with --batch-size B train on a global batch G = N x B, and
// after s batches an epoch has consumed exactly the first s x G positions of
// its order: DistributedSampler's permutation, padded to a multiple of N
// (one process: the permutation itself, RandomSampler's order). A checkpoint
// records N, B, the training set's size and the number of processes whose
// order the epoch in progress follows. Resuming it on M processes:
// - keeps the global batch: --batch-size must be G / M (refused otherwise,
//   naming the --batch-size that would fit), so the steps, the schedule and
//   the losses are the uninterrupted run's;
// - finishes the interrupted epoch in the saved run's padded order, split
//   over the M ranks the same strided way (rank r takes positions r, r + M,
//   ...), so each remaining step trains on exactly the images that step
//   would have trained on; this needs the padded length to be a multiple of
//   M (refused otherwise, naming the world sizes that fit);
// - trains the later epochs as an M-process run would (DistributedSampler
//   over M), the same images again when M divides the set's size.
// The interrupted epoch's loss and image counts are summed over the ranks
// before they are saved, so the resumed epoch reports the whole run's loss.
#pragma once

#include <cstdint>
#include <memory>

#include "apps/common/data_parallel_run.h"
#include "apps/lenet/evaluate.h"
#include "apps/lenet/options.h"
#include "data/sampler.h"
#include "distributed/process_group.h"

namespace kiln::apps::lenet {

// Steps between two agreements on whether to stop (Note [kiln-lenet with DDP]).
inline constexpr int64_t kStopCheckSteps = 32;

// Under --fsdp, the layers with at least this many parameters are FSDP
// units of their own (wrap_by_numel): fc1 (48,120) and fc2 (10,164), while
// the convolutions and fc3 (3,722 together) share the root unit. Smaller
// units would each add an all-gather and a reduce-scatter per step whose
// latency outweighs the few kilobytes they move.
inline constexpr int64_t kFsdpUnitNumel = 10'000;

// With --ddp, --fsdp or --pp: joins (or reuses) the default process group on
// --backend (apps/common/data_parallel_run.h); else a run of one process.
DataParallelRun start_data_parallel(const TrainerOptions& options);

// The epoch of a resumed run that follows another world size's order (Note
// [Resuming on another world size]).
struct CarriedEpoch {
  int64_t epoch = -1;      // none when -1
  int64_t replicas = 1;    // the processes whose padded order it follows
};

// The length of epoch orders for `replicas` processes: `dataset_size` padded
// to a multiple of `replicas`.
int64_t padded_order_size(int64_t dataset_size, int64_t replicas);

// This rank's share of each training epoch (null: the whole shuffled set,
// which the loader shuffles itself). With a carried epoch, that epoch is
// split over this run's ranks in the carried order.
std::shared_ptr<data::Sampler> train_sampler(const DataParallelRun& run, int64_t dataset_size, uint64_t seed,
                                             const CarriedEpoch& carried = {});
// This rank's share of the test set, without repeats (null: all of it).
std::shared_ptr<data::Sampler> test_sampler(const DataParallelRun& run, int64_t dataset_size);
// The batches of `batch_size` of the largest rank's share of the test set:
// how often every rank runs the model in a test pass under --fsdp.
int64_t test_batches_per_rank(const DataParallelRun& run, int64_t dataset_size, int64_t batch_size);

// The whole test set's evaluation from each rank's (no-op in one process).
Evaluation combine_evaluations(const Evaluation& local, const DataParallelRun& run);

}  // namespace kiln::apps::lenet
