// The training run of kiln-lenet as a library call, so that tests (and
// other programs) drive it in-process:
//
//   TrainerOptions o;
//   o.data = "data"; o.epochs = 2; o.save = "run.ckpt";
//   TrainingResult r = run_training(o);
//   // r.history: one EpochRecord per epoch; r.model: the trained network (--model)
//
// Note [Exact resume]
// A run stopped after any step and resumed from its checkpoint ends with the
// same parameters, bit for bit on the CPU, as a run that never stopped. Every
// source of randomness is a function of the seed and the position: the
// initial weights come from manual_seed(seed); epoch e's order is
// random_permutation(n, seed + e) (loader.set_epoch) and its augmentation of
// sample i is seeded by (seed, e, i) (dataset set_epoch, Note [Image dataset
// samples]). The checkpoint holds the model, the optimizer's state, the
// scheduler's step, the global step and, in its extra strings, the epoch, the
// steps done within it and the partial loss sums of that epoch, and the
// history of finished epochs. Resuming re-runs epoch e's order and skips the
// batches already trained on. The recipe (epochs, optimizer, schedule, lr,
// momentum, weight decay, augmentation, seed) must be the run's: a
// checkpoint made with another is refused, naming both. The checkpoint also
// records the world size, the per-process batch, the training set's size
// and the order the epoch in progress follows, so that another number of
// processes can resume it exactly or is refused saying why (Note [Resuming
// on another world size] in data_parallel.h); every tensor carries a
// checksum (Note [safetensors layout]).
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <vector>

#include "apps/common/interrupt.h"
#include "apps/lenet/evaluate.h"
#include "apps/lenet/history.h"
#include "apps/lenet/models.h"
#include "apps/lenet/options.h"

namespace kiln::apps::lenet {

struct TrainerHooks {
  std::ostream* out = &std::cout;
  // Warnings: more threads than cores, a chart that could not be written.
  std::ostream* err = &std::cerr;
  // Rewrite the progress line in place ("\r"); else print plain lines.
  bool interactive = false;
  // Asked after every training step and after every epoch but the last,
  // with the number of steps done in the whole run; true stops the run
  // there: with --save the checkpoint is written and the run returns
  // Interrupted. Empty: interrupt_requested() (apps/common/interrupt.h).
  std::function<bool(int64_t global_step)> should_stop = {};
};

enum class RunStatus { Finished, Interrupted, Evaluated };

struct TrainingResult {
  RunStatus status = RunStatus::Finished;
  std::vector<EpochRecord> history;   // every finished epoch, resumed ones included
  Evaluation evaluation;              // of the final model (not when Interrupted)
  std::vector<std::string> class_names;
  std::shared_ptr<nn::Module> model;  // the --model network (make_model)
  int64_t epoch = 0;          // the epoch the run stopped in (0-based) or epochs when finished
  int64_t step_in_epoch = 0;  // steps done in that epoch
  int64_t global_step = 0;    // optimizer steps in the whole run
};

// Trains (or with eval_only evaluates) as the options say, printing the
// progress, the epoch summaries and the per-class table to hooks.out.
// Throws kiln::Error for invalid options, unreadable data or checkpoints,
// and whatever the device throws (CUDA kernels not yet written).
TrainingResult run_training(const TrainerOptions& options, const TrainerHooks& hooks = {});

}  // namespace kiln::apps::lenet
