// `kiln-gpt train` as a library call, so that tests drive it in-process:
//
//   TrainOptions o;
//   o.data = "book.txt"; o.steps = 200; o.save = "run.ckpt";
//   TrainingResult r = run_training(o);
//   // r.history: one EvalRecord per evaluation; r.model: the trained GPT
//
// Note [Exact resume of kiln-gpt]
// A run stopped after any step and resumed from its checkpoint ends with the
// same parameters, bit for bit on the CPU, as a run that never stopped.
// Every source of randomness is a function of the seed and the step: the
// initial weights come from manual_seed(seed); training batch i is
// RandomWindowBatches::batch(i), a pure function of (seed, i) (Note [Token
// windows]); dropout draws from the default generator, whose state the
// checkpoint saves (optim/training_checkpoint.h); the lr is
// learning_rate(step). Evaluations draw nothing (fixed windows, eval mode),
// so their placement does not change the trajectory. The checkpoint holds
// the model, AdamW's state, the step and the generator, and in its extra
// strings the recipe (every flag that shapes the trajectory; a checkpoint
// made with another is refused, naming both), the tokenizer's file (so a
// resumed run and `kiln-gpt sample` encode exactly as the run did; a BPE is
// not learned again), the text's hash and size, the history of evaluations
// and the running loss shown on the progress line.
//
// Note [kiln-gpt across processes]
// `kiln-run --nproc-per-node 2 build/apps/gpt/kiln-gpt train --ddp` starts
// two processes; each joins the default process group (env://, from the
// variables kiln-run sets; apps/common/data_parallel_run.h), wraps its GPT
// in DistributedDataParallel, or with --fsdp in FullyShardedDataParallel
// with every transformer block a unit (Note [Trainers under FSDP]), and
// trains on its share of every batch:
// - --batch-size B is per process; the global batch is G = N x B. Training
//   batch i is the one-process run's batch i of G windows (a function of
//   (seed, i, G), Note [Token windows]) and rank r trains on its rows
//   [r B, (r + 1) B), so N processes take the steps one process takes with
//   --batch-size G. The recipe records G: a checkpoint resumes on any number
//   of processes whose --batch-size times their number is G (exactly, bit
//   for bit, on the same number).
// - An evaluation reads the fixed windows of a one-process run with batch
//   G; each rank evaluates its rows of each batch and the loss sums are
//   summed over the ranks, so every rank ends with the whole evaluation.
// - Dropout draws from per_rank_seed(seed, rank), so the ranks' masks
//   differ; a checkpoint keeps rank 0's generator offset, the same on every
//   rank, and each rank resumes from its own seed at that offset.
// - Rank 0 alone prints, logs, plots and writes checkpoints (the progress
//   line shows its own running loss); every rank reads the checkpoint to
//   resume. After every step the ranks agree, in one all_reduce, on whether
//   to stop (Ctrl-C reaches them at different steps). Every rank prints
//   what it holds in memory at the start and at the end of training.
// `kiln-run --nproc-per-node 2 ... kiln-gpt train --pp 2` instead cuts the
// GPT into pipeline stages by blocks, one per process (Note [Trainers under
// pipeline parallelism] in apps/common/pipeline_training.h): every rank
// reads the whole batch, --batch-size is the whole batch, and the run
// returns the whole model gathered from the stages on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <vector>

#include "apps/common/interrupt.h"
#include "apps/gpt/history.h"
#include "apps/gpt/options.h"
#include "data/tokenizer.h"
#include "nn/models/gpt.h"

namespace kiln::apps::gpt {

struct TrainerHooks {
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;  // warnings: more threads than cores, a chart that could not be written
  bool interactive = false;        // rewrite the progress line in place ("\r"); else print plain lines
  // Asked after every step but the last, with the steps done; true stops
  // the run there: with --save the checkpoint is written and the run
  // returns Interrupted. Empty: interrupt_requested().
  std::function<bool(int64_t step)> should_stop = {};
};

enum class RunStatus { Finished, Interrupted };

struct TrainingResult {
  RunStatus status = RunStatus::Finished;
  std::vector<EvalRecord> history;  // every evaluation, resumed ones included
  std::shared_ptr<nn::GPT> model;   // a plain GPT with the trained parameters (also after --fsdp)
  std::shared_ptr<data::Tokenizer> tokenizer;
  int64_t step = 0;  // optimizer steps taken in the whole run
};

// Trains as the options say, printing the progress and a line per
// evaluation to hooks.out. Throws kiln::Error for invalid options,
// unreadable text or checkpoints, or a checkpoint that does not fit.
TrainingResult run_training(const TrainOptions& options, const TrainerHooks& hooks = {});

// The model a kiln-gpt checkpoint holds: its config (dropout 0), its
// tokenizer and its weights (the state dict, "model." taken off). Throws
// kiln::Error naming the file ("--checkpoint '<path>'") when it is not a
// kiln-gpt checkpoint.
struct CheckpointModel {
  nn::GPTConfig config;
  std::shared_ptr<data::Tokenizer> tokenizer;
  TensorDict weights;
};
CheckpointModel read_checkpoint_model(const std::string& path);

}  // namespace kiln::apps::gpt
