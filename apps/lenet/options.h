// The command line of kiln-lenet: every setting of a training run in one
// struct, with the default recipe in one place (TrainerOptions' initialisers).
//
//   CommandLine cl = parse_command_line(argc, argv);
//   if (!cl.options) return cl.exit_code;   // --help, or a CLI11 parse error (printed)
//   TrainingResult r = run_training(*cl.options);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/pipeline_training.h"

namespace kiln::apps::lenet {

enum class OptimizerKind { SGD, Adam, AdamW, Adam8bit, AdamW8bit };
enum class ScheduleKind { None, Cosine, OneCycle };

// "sgd", "adam", "adamw", "adam8bit", "adamw8bit" (quant/adam8bit.h: 8-bit
// state, CPU only) / "none", "cosine", "onecycle": the spellings the
// command line takes. The parsers throw kiln::Error naming the flag, the
// value and the accepted ones.
std::string to_string(OptimizerKind kind);
std::string to_string(ScheduleKind kind);
OptimizerKind parse_optimizer(const std::string& name);
ScheduleKind parse_schedule(const std::string& name);

// The default recipe is what these initialisers say; --help prints them.
// It reaches 70.6% test accuracy on the shared cifar10-jpeg data after 30
// epochs, 65% first after 21 (docs/BENCHMARKS.md); a peak lr of 0.05
// plateaued near 52% at its peak and was dropped.
struct TrainerOptions {
  // The network (apps/lenet/models.h): "lenet" or "resnet20". The recipe
  // below is LeNet's; ResNet-20's is in docs/TRAINING.md.
  std::string model = "lenet";
  // A CIFAR-10 binary release (folder or .tar.gz) or an image folder with
  // train/ and test/ (data_source.h).
  std::string data = "data";
  int64_t epochs = 30;
  int64_t batch_size = 64;
  // The peak lr with the onecycle schedule, the initial one otherwise.
  double lr = 0.02;
  // SGD's momentum; with onecycle it cycles between 0.85 and 0.95 instead
  // (OneCycleLR's defaults, as PyTorch's), for Adam(W) beta1 does.
  double momentum = 0.9;
  double weight_decay = 5e-4;
  OptimizerKind optimizer = OptimizerKind::SGD;
  ScheduleKind schedule = ScheduleKind::OneCycle;
  // RandomCrop(32, padding 4) + RandomHorizontalFlip on the training set.
  bool augment = true;
  int threads = 0;  // CPU kernel threads; 0: all cores
  std::string device = "cpu";
  // Mixed precision: the forward under autocast (Note [Autocast]), bfloat16
  // on the CPU, float16 on CUDA with dynamic loss scaling (Note [Dynamic loss
  // scaling]); parameters, gradients and updates stay float32.
  bool amp = false;
  uint64_t seed = 0;
  // DataLoader worker threads. 0 by default: LeNet's per-batch crops and
  // flips take ~3% of a step, while a worker waking for each batch preempts
  // one of the kernel threads on a machine whose cores they all use, and a
  // kernel's threads then wait for it at their barrier (2 workers on the
  // 2-core test machine: 8,200 instead of 14,300 images/s). Give workers
  // the cores the kernels leave free (--threads below the core count).
  int64_t workers = 0;
  std::string save;     // training checkpoint written every epoch and on Ctrl-C
  std::string resume;   // training checkpoint to continue from
  std::string weights;  // a model state dict (safetensors) for --eval-only or --quantize
  bool eval_only = false;
  // --quantize dynamic,static,qat: the trained model of --weights (or
  // --resume) quantized each way, with accuracy, size and latency beside
  // float32 (apps/lenet/quantize.h); nothing is trained but QAT's fine-tuning.
  std::vector<std::string> quantize;
  int64_t calib_images = 512;  // training images that calibrate static quantization
  double qat_epochs = 1;       // QAT fine-tuning passes over the training set
  bool sensitivity = false;    // with --quantize: also the per-layer sensitivity table
  bool reduce_range = false;   // with --quantize: 7-bit activations (static and qat)
  // Data parallel training over the processes kiln-run starts (Note
  // [kiln-lenet with DDP]); batch_size is then per process.
  bool ddp = false;
  // The same with the model sharded over the processes by
  // FullyShardedDataParallel (Note [Trainers under FSDP] in
  // apps/common/sharded_training.h), with --fsdp-strategy's sharding:
  // full_shard, shard_grad_op, no_shard or hybrid_shard (Note [FSDP
  // sharding strategies]).
  bool fsdp = false;
  std::string fsdp_strategy = "full_shard";
  std::string backend = "gloo";  // of the process group: gloo, mpi or nccl
  // With --ddp, --fsdp or --pp, in seconds: how long the rendezvous and each
  // collective may take, and how long a silent peer is waited for before it
  // is named. 0: KILN_DISTRIBUTED_TIMEOUT / KILN_HEARTBEAT_TIMEOUT, else the
  // defaults (distributed/init.h).
  double timeout = 0;
  double heartbeat_timeout = 0;
  // Pipeline parallelism over the processes kiln-run starts (Note [Trainers
  // under pipeline parallelism] in apps/common/pipeline_training.h): --pp N
  // cuts LeNet (nn::LeNet::as_sequential, 12 modules) into N stages
  // balanced by parameter count, one process each (N x virtual_stages with
  // interleaved); pp_schedule is gpipe, 1f1b, interleaved or zero-bubble;
  // micro_batches 0 is the most up to 2N that batch_size splits into;
  // virtual_stages 0 is 2 for interleaved, else 1. batch_size is then the
  // whole batch, which every process reads.
  int64_t pp = 0;
  std::string pp_schedule = "1f1b";
  int64_t micro_batches = 0;
  int64_t virtual_stages = 0;
  // DataParallel in this process: one replica per CUDA device with --device
  // cuda, else `replicas` replicas on the CPU, each batch split between them.
  bool dp = false;
  int64_t replicas = 2;
  // Batches per optimizer step (gradient accumulation).
  int64_t accum_steps = 1;
  std::string log;   // one JSON object per epoch, appended
  std::string plot;  // SVG of the losses and accuracy, rewritten every epoch
};

// Throws kiln::Error naming the flag for a value out of range: an unknown
// model, epochs,
// batch size < 1, a negative, infinite or NaN lr, momentum, weight decay or
// timeout, negative threads or workers, an unknown device or FSDP strategy,
// --eval-only without --resume or --weights, and flags that exclude each
// other (--ddp, --fsdp and --dp; --fsdp with --amp on CUDA; --pp with any
// of them, --model resnet20, --save, --resume, --eval-only, --quantize,
// --amp, --accum-steps or a CUDA device).
void validate(const TrainerOptions& options);

// The --pp flags of `options`, as apps/common/pipeline_training.h takes them.
PipelineFlags pipeline_flags(const TrainerOptions& options);

// The result of parsing: options to run with, or none and the exit code
// (0 after --help; CLI11's code after a parse error, already printed).
struct CommandLine {
  std::optional<TrainerOptions> options;
  int exit_code = 0;
};

// Parses and validates argv (argv[0] is the program). Validation errors and
// integers that are malformed or out of their type's range ("--seed -1",
// "--epochs 99999999999999999999") throw kiln::Error naming the flag;
// CLI11's own errors (unknown flag, missing value, a float that is not a
// number) are printed to stderr and returned as an exit code.
CommandLine parse_command_line(int argc, const char* const* argv);
CommandLine parse_command_line(const std::vector<std::string>& args);

}  // namespace kiln::apps::lenet
