// What a data-parallel training script needs beside DistributedDataParallel:
// metrics summed over the ranks, one process that writes files, per-rank
// seeds, and a common decision to stop.
//
//   std::vector<double> sums = {loss_sum, correct, images};
//   all_reduce_sum(sums, group);                  // the whole test set's
//   if (is_main_process(group)) save_checkpoint(...);
//   if (any_rank_wants(stop_requested, group)) break;   // every rank stops at the same step
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/process_group.h"

namespace kiln::distributed {

// Replaces each value with its sum over the ranks of `group` (one
// all_reduce of a float64 tensor). Every rank must call it with the same
// number of values.
void all_reduce_sum(std::vector<double>& values, ProcessGroup& group);
void all_reduce_sum(std::vector<int64_t>& values, ProcessGroup& group);

// True on rank 0: the process that prints, logs and saves checkpoints, so
// that N processes do not write one file at once.
bool is_main_process(const ProcessGroup& group);

// A seed for things that must differ between ranks (dropout masks, a
// rank's own augmentation stream) while the run stays reproducible:
// a 64-bit mix of (seed, rank). What must be the same on every rank (the
// initial weights, the shuffling order) keeps the plain seed.
uint64_t per_rank_seed(uint64_t seed, int rank);

// True on every rank if `wanted` is true on any: a Ctrl-C reaches the ranks
// at slightly different steps, and a rank that stopped alone would leave
// the others waiting in their next collective. One all_reduce (max).
bool any_rank_wants(bool wanted, ProcessGroup& group);

}  // namespace kiln::distributed
