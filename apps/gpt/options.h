// The command line of kiln-gpt: `kiln-gpt train` and `kiln-gpt sample`, every
// setting in one struct each, the default recipe in one place
// (TrainOptions' initialisers).
//
//   CommandLine cl = parse_command_line(argc, argv);
//   if (cl.train) run_training(*cl.train);
//   else if (cl.sample) run_sampling(*cl.sample);
//   else return cl.exit_code;          // --help, or a CLI11 parse error (printed)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/pipeline_training.h"

namespace kiln::apps::gpt {

// The default recipe is what these initialisers say; --help prints them. It
// is nanoGPT's Shakespeare-char recipe scaled to two CPU cores, on the
// fortunes corpus: a smaller model, which takes a higher peak lr; fewer
// steps; no dropout, which a run this short does not need (it sees each
// character two or three times). docs/TRAINING.md states the time it takes, the
// validation loss it reaches, and the lrs tried.
struct TrainOptions {
  // A UTF-8 text file; empty: the fortunes corpus (data::load_fortunes).
  std::string data;
  std::string tokenizer = "char";  // "char" or "bpe"
  int64_t vocab_size = 512;        // with bpe: 256 bytes + merges learned from the text
  // The model (nn::GPTConfig).
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;
  double dropout = 0.0;
  bool bias = true;
  // The optimization: AdamW over nanoGPT's weight-decay groups, the lr
  // warming up linearly for warmup_steps and then decaying to min_lr along
  // a cosine until the last step (learning_rate()).
  int64_t batch_size = 32;
  int64_t steps = 1400;
  double lr = 6e-3;
  double min_lr = 6e-4;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double grad_clip = 1.0;  // max gradient norm; 0: no clipping
  // Evaluation: every eval_interval steps (and at the start and the end),
  // the mean loss over eval_batches fixed batches of each split.
  int64_t eval_interval = 100;
  int64_t eval_batches = 10;
  uint64_t seed = 1337;
  int threads = 0;  // CPU kernel threads; 0: all cores
  std::string device = "cpu";
  // Mixed precision: the forward under autocast (Note [Autocast]), bfloat16
  // on the CPU, float16 on CUDA with dynamic loss scaling; parameters,
  // gradients and updates stay float32.
  bool amp = false;
  std::string save;    // training checkpoint, written at every evaluation and on Ctrl-C
  std::string resume;  // training checkpoint to continue from
  std::string log;     // one JSON object per evaluation, appended
  std::string plot;    // SVG of the train and validation loss, rewritten at every evaluation
  // Data parallel training over the processes kiln-run starts (Note
  // [kiln-gpt across processes] in trainer.h): with DistributedDataParallel,
  // or with FullyShardedDataParallel and --fsdp-strategy's sharding
  // (full_shard, shard_grad_op, no_shard, hybrid_shard; Note [Trainers under
  // FSDP] in apps/common/sharded_training.h). batch_size is then per process.
  bool ddp = false;
  bool fsdp = false;
  std::string fsdp_strategy = "full_shard";
  // With --fsdp on a CUDA --device: the shards, gradients and AdamW state in
  // host memory, each unit gathered onto the GPU to compute (Note [FSDP mixed
  // precision] in distributed/fsdp/flat_param.h).
  bool fsdp_cpu_offload = false;
  std::string backend = "gloo";  // of the process group: gloo, mpi or nccl
  // Pipeline parallelism over the processes kiln-run starts (Note [Trainers
  // under pipeline parallelism] in apps/common/pipeline_training.h): --pp N
  // cuts the GPT into N stages by blocks (N x virtual_stages with
  // interleaved), one process each; pp_schedule is gpipe, 1f1b, interleaved
  // or zero-bubble; micro_batches 0 is the most up to 2N that batch_size
  // splits into; virtual_stages 0 is 2 for interleaved, else 1. batch_size
  // is then the whole batch, which every process reads.
  int64_t pp = 0;
  std::string pp_schedule = "1f1b";
  int64_t micro_batches = 0;
  int64_t virtual_stages = 0;
  // With --ddp, --fsdp or --pp, in seconds: the rendezvous's and each collective's
  // limit, and how long a silent peer is waited for (0: the environment's,
  // else distributed/init.h's defaults).
  double timeout = 0;
  double heartbeat_timeout = 0;
};

// Throws kiln::Error naming the flag for a value out of range, and for
// flags that exclude each other (--ddp and --fsdp; --fsdp with --amp on
// CUDA; --pp with --ddp, --fsdp, --save, --resume, --amp or a CUDA device) or
// only go with others (--backend, the timeouts, --fsdp-strategy, and
// --schedule, --micro-batches and --virtual-stages with --pp).
void validate(const TrainOptions& options);

// The --pp flags of `options`, as apps/common/pipeline_training.h takes them.
PipelineFlags pipeline_flags(const TrainOptions& options);

// nanoGPT's get_lr: (step + 1) / (warmup_steps + 1) of lr during the
// warmup, then a cosine from lr at step warmup_steps to min_lr at step
// `steps`; step is 0-based (the step about to be taken).
double learning_rate(const TrainOptions& options, int64_t step);

struct SampleOptions {
  std::string checkpoint;  // a kiln-gpt training checkpoint (--save)
  std::string prompt = "\n";
  int64_t max_new_tokens = 500;
  double temperature = 0.8;  // 0: always the most likely token
  int64_t top_k = 200;       // 0: sample from every token
  int64_t num_samples = 1;
  uint64_t seed = 1337;
  std::string device = "cpu";
  int threads = 0;
};

void validate(const SampleOptions& options);

// The result of parsing: the subcommand's options, or neither and the exit
// code (0 after --help; CLI11's code after a parse error, already printed).
struct CommandLine {
  std::optional<TrainOptions> train;
  std::optional<SampleOptions> sample;
  int exit_code = 0;
};

// Parses and validates argv (argv[0] is the program). Validation errors and
// malformed or out-of-range integers throw kiln::Error naming the flag;
// CLI11's own errors (unknown flag or subcommand, missing value, a float
// that is not a number) are printed to stderr and returned as an exit code.
CommandLine parse_command_line(int argc, const char* const* argv);
CommandLine parse_command_line(const std::vector<std::string>& args);

}  // namespace kiln::apps::gpt
