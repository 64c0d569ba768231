// kiln-lenet --ddp: the pieces of a run that change when several processes
// train one model.
//
// Note [kiln-lenet with DDP]
// `kiln-run --nproc-per-node 2 build/apps/lenet/kiln-lenet --ddp` starts two
// processes; each joins the default process group (init_process_group with
// env://, from the variables kiln-run sets), wraps its LeNet in
// DistributedDataParallel and trains on its share of each epoch:
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
#pragma once

#include <cstdint>
#include <memory>

#include "apps/lenet/evaluate.h"
#include "apps/lenet/options.h"
#include "data/sampler.h"
#include "distributed/process_group.h"

namespace kiln::apps::lenet {

// Steps between two agreements on whether to stop (Note [kiln-lenet with DDP]).
inline constexpr int64_t kStopCheckSteps = 32;

struct DataParallelRun {
  std::shared_ptr<distributed::ProcessGroup> group;  // null without --ddp
  int rank = 0;
  int world_size = 1;
  bool initialized_here = false;  // this run called init_process_group

  bool is_main() const { return rank == 0; }
};

// With --ddp: joins (or reuses) the default process group on --backend.
DataParallelRun start_data_parallel(const TrainerOptions& options);
// Leaves the default group if start_data_parallel joined it.
void finish_data_parallel(DataParallelRun& run);

// This rank's share of each training epoch (null: the whole shuffled set).
std::shared_ptr<data::Sampler> train_sampler(const DataParallelRun& run, int64_t dataset_size, uint64_t seed);
// This rank's share of the test set, without repeats (null: all of it).
std::shared_ptr<data::Sampler> test_sampler(const DataParallelRun& run, int64_t dataset_size);

// The whole test set's evaluation from each rank's (no-op in one process).
Evaluation combine_evaluations(const Evaluation& local, const DataParallelRun& run);

}  // namespace kiln::apps::lenet
