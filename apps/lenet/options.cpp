// kiln-lenet's flags, through CLI11. Range checks live in validate() rather
// than in CLI11 validators so that the library API (run_training) applies
// the same checks to options built in code.
#include "apps/lenet/options.h"

#include <cmath>
#include <limits>

#include "apps/common/cli.h"
#include "apps/common/data_parallel_run.h"
#include "apps/common/run_setup.h"
#include "apps/common/sharded_training.h"
#include "apps/lenet/models.h"
#include "tensor/device.h"
#include "tensor/error.h"

namespace kiln::apps::lenet {

std::string to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD: return "sgd";
    case OptimizerKind::Adam: return "adam";
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::Adam8bit: return "adam8bit";
    case OptimizerKind::AdamW8bit: return "adamw8bit";
  }
  return "?";
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::None: return "none";
    case ScheduleKind::Cosine: return "cosine";
    case ScheduleKind::OneCycle: return "onecycle";
  }
  return "?";
}

OptimizerKind parse_optimizer(const std::string& name) {
  for (OptimizerKind kind : {OptimizerKind::SGD, OptimizerKind::Adam, OptimizerKind::AdamW, OptimizerKind::Adam8bit,
                             OptimizerKind::AdamW8bit}) {
    if (name == to_string(kind)) return kind;
  }
  KILN_CHECK(false, "--optimizer: unknown optimizer '", name, "' (expected sgd, adam, adamw, adam8bit or adamw8bit)");
  return OptimizerKind::SGD;
}

ScheduleKind parse_schedule(const std::string& name) {
  for (ScheduleKind kind : {ScheduleKind::None, ScheduleKind::Cosine, ScheduleKind::OneCycle}) {
    if (name == to_string(kind)) return kind;
  }
  KILN_CHECK(false, "--schedule: unknown schedule '", name, "' (expected none, cosine or onecycle)");
  return ScheduleKind::None;
}

namespace {

// No run comes near it; above it epochs x steps could overflow int64.
constexpr int64_t kMaxEpochs = 1'000'000'000;

// A timeout flag given on the command line: a positive, finite number of seconds.
CLI::Option* add_timeout(CLI::App& app, const std::string& flag, double& target, const std::string& description) {
  return app.add_option_function<double>(
      flag,
      [&target, flag](double seconds) {
        KILN_CHECK(std::isfinite(seconds) && seconds > 0 && seconds <= kMaxTimeoutSeconds, flag,
                   " must be a positive number of seconds up to ", kMaxTimeoutSeconds, ", got ", seconds);
        target = seconds;
      },
      description)
      ->type_name("SECONDS");
}

}  // namespace

PipelineFlags pipeline_flags(const TrainerOptions& o) {
  return {.pp = o.pp, .schedule = o.pp_schedule, .micro_batches = o.micro_batches,
          .virtual_stages = o.virtual_stages};
}

void validate(const TrainerOptions& o) {
  check_model_name(o.model);
  KILN_CHECK(o.epochs > 0, "--epochs must be at least 1, got ", o.epochs);
  KILN_CHECK(o.epochs <= kMaxEpochs, "--epochs must be at most ", kMaxEpochs, ", got ", o.epochs);
  KILN_CHECK(o.batch_size > 0, "--batch-size must be at least 1, got ", o.batch_size);
  KILN_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be positive and finite, got ", o.lr);
  KILN_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1), got ", o.momentum);
  KILN_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
             "--weight-decay must be non-negative and finite, got ", o.weight_decay);
  check_pipeline_flags(pipeline_flags(o), "--pp-schedule", o.batch_size);
  if (o.pp > 0) {
    const std::pair<const char*, bool> excluded[] = {{"--ddp", o.ddp}, {"--fsdp", o.fsdp}, {"--dp", o.dp}};
    for (const auto& [flag, given] : excluded) {
      KILN_CHECK(!given, "--pp and ", flag, " exclude each other for now: a pipeline stage is not replicated or "
                 "sharded yet; give one");
    }
    const std::pair<const char*, bool> unsupported[] = {{"--save", !o.save.empty()}, {"--resume", !o.resume.empty()},
                                                        {"--eval-only", o.eval_only}, {"--quantize", !o.quantize.empty()},
                                                        {"--amp", o.amp}, {"--accum-steps", o.accum_steps > 1}};
    for (const auto& [flag, given] : unsupported) {
      KILN_CHECK(!given, "--pp with ", flag, " is not supported yet: kiln-lenet pipelines plain float32 "
                 "training steps, without checkpoints");
    }
    KILN_CHECK(o.model == "lenet", "--pp cuts LeNet into stages; --model ", o.model, " is not a Sequential yet");
    KILN_CHECK(o.device == "cpu", "--pp runs on the CPU only for now (stages exchange activations over gloo), got "
               "--device ", o.device);
  }
  check_process_group_flags({.backend = o.backend, .timeout = o.timeout, .heartbeat_timeout = o.heartbeat_timeout},
                            o.ddp || o.fsdp || o.pp > 0);
  KILN_CHECK(o.threads >= 0, "--threads must be non-negative (0: all cores), got ", o.threads);
  KILN_CHECK(o.workers >= 0, "--workers must be non-negative (0: load batches on the training thread), got ",
             o.workers);
  KILN_CHECK(!o.data.empty(), "--data must name a data set");
  check_device_flag(o.device);
  KILN_CHECK(o.accum_steps >= 1, "--accum-steps must be at least 1, got ", o.accum_steps);
  KILN_CHECK(!(o.ddp && o.eval_only), "--eval-only runs in one process; drop --ddp");
  KILN_CHECK(!(o.fsdp && o.eval_only), "--eval-only runs in one process; drop --fsdp");
  KILN_CHECK(!(o.ddp && o.fsdp),
             "--ddp and --fsdp exclude each other: DDP keeps the whole model on every "
             "process, FSDP shards it over them; give one");
  KILN_CHECK(!(o.ddp && o.dp), "--ddp and --dp exclude each other: one process per replica, or one process "
                               "for all of them");
  KILN_CHECK(!(o.fsdp && o.dp),
             "--fsdp and --dp exclude each other: --fsdp shards the model over processes, "
             "--dp replicates it in one process");
  check_fsdp_flags(o.fsdp, o.fsdp_strategy, o.amp, o.device);
  const bool eight_bit = o.optimizer == OptimizerKind::Adam8bit || o.optimizer == OptimizerKind::AdamW8bit;
  KILN_CHECK(!eight_bit || Device(o.device).is_cpu(), "--optimizer ", to_string(o.optimizer),
             " updates its 8-bit state on the CPU only, not with --device ", o.device);
  KILN_CHECK(!eight_bit || !o.fsdp, "--optimizer ", to_string(o.optimizer),
             " keeps block-wise state that --fsdp cannot shard; use adam or adamw");
  KILN_CHECK(o.replicas >= 1, "--replicas must be at least 1, got ", o.replicas);
  KILN_CHECK(!o.eval_only || !o.resume.empty() || !o.weights.empty(),
             "--eval-only needs the model to evaluate: give --resume CHECKPOINT or --weights FILE.safetensors");
  KILN_CHECK(o.resume.empty() || o.weights.empty(), "--resume and --weights exclude each other: a checkpoint '",
             o.resume, "' already holds the weights");
  KILN_CHECK(o.eval_only || !o.quantize.empty() || o.weights.empty(),
             "--weights only goes with --eval-only or --quantize; to continue training, use --resume with a checkpoint");
  for (const auto& mode : o.quantize) {
    KILN_CHECK(mode == "dynamic" || mode == "static" || mode == "qat", "--quantize: unknown mode '", mode,
               "' (expected dynamic, static or qat, comma-separated)");
  }
  KILN_CHECK(!o.sensitivity || !o.quantize.empty(), "--sensitivity goes with --quantize (e.g. --quantize static "
             "--sensitivity)");
  KILN_CHECK(o.quantize.empty() || !o.resume.empty() || !o.weights.empty(),
             "--quantize needs the trained model: give --weights FILE.safetensors or --resume CHECKPOINT");
  KILN_CHECK(o.quantize.empty() || !(o.ddp || o.fsdp || o.dp || o.eval_only),
             "--quantize runs in one process on its own; drop --ddp, --fsdp, --dp and --eval-only");
  KILN_CHECK(!o.reduce_range || !o.quantize.empty(), "--reduce-range goes with --quantize (e.g. --quantize static "
             "--reduce-range)");
  KILN_CHECK(o.calib_images >= 1, "--calib-images must be at least 1, got ", o.calib_images);
  KILN_CHECK(o.qat_epochs > 0, "--qat-epochs must be positive, got ", o.qat_epochs);
}

CommandLine parse_command_line(int argc, const char* const* argv) {
  TrainerOptions o;
  std::string optimizer = to_string(o.optimizer);
  std::string schedule = to_string(o.schedule);

  CLI::App app{
      "Trains LeNet-5 (or ResNet-20) on CIFAR-10 (or on an image folder of 32x32 RGB images) and reports the test "
      "accuracy per class. The defaults are LeNet's recommended recipe."};
  app.get_formatter()->column_width(34);
  app.add_option("--data", o.data,
                 "a folder holding cifar-10-batches-bin/ (or cifar-10-binary.tar.gz), that folder itself, the "
                 "cifar-10-binary.tar.gz archive, or an image folder ROOT with ROOT/train/<class>/* and "
                 "ROOT/test/<class>/*, on disk or as a .tar.gz (ROOT at its top or one folder down)")
      ->capture_default_str();
  app.add_option("--model", o.model, "the network: lenet, or resnet20 (CIFAR ResNet-20, nn/models/resnet.h)")
      ->capture_default_str();
  add_integer(app, "--epochs", o.epochs, "passes over the training set");
  add_integer(app, "--batch-size", o.batch_size, "images per step");
  app.add_option("--lr", o.lr, "learning rate (the peak with --schedule onecycle)")->capture_default_str();
  app.add_option("--momentum", o.momentum,
                 "SGD momentum (with --schedule onecycle, momentum cycles between 0.85 and 0.95 instead)")
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 penalty (sgd, adam, adam8bit) or decoupled decay (adamw, adamw8bit)")
      ->capture_default_str();
  app.add_option("--optimizer", optimizer, "sgd, adam, adamw, adam8bit or adamw8bit (8-bit state, CPU)")
      ->capture_default_str();
  app.add_option("--schedule", schedule,
                 "learning-rate schedule, stepped every batch: none, cosine (to 0 at the end) or onecycle")
      ->capture_default_str();
  app.add_flag("--augment,!--no-augment", o.augment,
               "augment the training images: RandomCrop(32, padding 4) + RandomHorizontalFlip (default on; "
               "--no-augment or --augment=off turns it off)");
  add_integer(app, "--threads", o.threads,
              "threads of the CPU kernels (0: all cores); more than the cores (over all processes on the machine) "
              "is warned about, as it runs several times slower");
  app.add_option("--device", o.device, "cpu or cuda (cuda:N)")->capture_default_str();
  app.add_flag("--amp", o.amp,
               "mixed precision: convolutions and linear layers in bfloat16 on the CPU, in float16 with dynamic "
               "loss scaling on CUDA; parameters and updates stay float32");
  add_integer(app, "--seed", o.seed, "seeds the initial weights, the shuffling and the augmentation");
  add_integer(app, "--workers", o.workers, "DataLoader worker threads (0: load on the training thread)");
  app.add_option("--save", o.save,
                 "write a training checkpoint to FILE after every epoch and on Ctrl-C (then exit with code 130); "
                 "it records the world size and the data order, and checksums every tensor");
  app.add_option("--resume", o.resume,
                 "continue the run saved in checkpoint FILE (with the same flags; on another number of processes, "
                 "with the --batch-size that keeps the global batch)");
  app.add_option("--weights", o.weights, "a model state dict (.safetensors) to evaluate with --eval-only");
  app.add_option("--quantize", o.quantize,
                 "quantize the trained model of --weights (or --resume) to int8: any of dynamic,static,qat; prints "
                 "test accuracy, model size and latency at batch 1 and 64 beside float32, on one thread")
      ->delimiter(',');
  add_integer(app, "--calib-images", o.calib_images, "training images that calibrate --quantize static and qat");
  app.add_option("--qat-epochs", o.qat_epochs, "QAT fine-tuning passes over the training set with --quantize qat");
  app.add_flag("--reduce-range", o.reduce_range,
               "with --quantize: 7-bit activations for static and qat (as torch's x86 qconfig), which CPUs without "
               "VNNI multiply at twice the rate");
  app.add_flag("--sensitivity", o.sensitivity,
               "with --quantize: also the per-layer sensitivity table (test accuracy with only that layer "
               "quantized, static and calibrated), most sensitive first");
  app.add_flag("--eval-only", o.eval_only,
               "only evaluate the test set (the model of --resume or --weights) and print the per-class table");
  add_data_parallel_flags(app, {o.ddp, o.fsdp, o.fsdp_strategy, o.backend}, "kiln-lenet");
  app.add_flag("--dp", o.dp,
               "train with DataParallel in this process: one replica per GPU with --device cuda, else "
               "--replicas replicas on the CPU, each batch split between them");
  add_integer(app, "--replicas", o.replicas, "DataParallel replicas on the CPU with --dp");
  add_integer(app, "--pp", o.pp,
              "pipeline parallelism over N processes (kiln-run --nproc-per-node N kiln-lenet --pp N): LeNet cut into "
              "N stages balanced by parameters, one per process; --batch-size is the whole batch, which every "
              "process reads; test accuracy on the stages' weights gathered to every process; no --save, --resume, "
              "--amp, CUDA, --ddp, --fsdp or --dp yet (0: no pipeline)");
  add_pipeline_flags(app, {o.pp_schedule, o.micro_batches, o.virtual_stages}, "--pp-schedule");
  add_integer(app, "--accum-steps", o.accum_steps,
              "batches per optimizer step (gradient accumulation; with --ddp only the last one communicates)");
  add_timeout(app, "--timeout", o.timeout,
              "with --ddp, --fsdp or --pp: seconds the rendezvous and each collective may take (default: "
              "KILN_DISTRIBUTED_TIMEOUT, else 300)");
  add_timeout(app, "--heartbeat-timeout", o.heartbeat_timeout,
              "with --ddp, --fsdp or --pp: seconds a silent peer is waited for before it is named (default: "
              "KILN_HEARTBEAT_TIMEOUT, else 10)");
  app.add_option("--log", o.log,
                 "write one JSON object per epoch to FILE.jsonl (a new file; --resume appends to it)");
  app.add_option("--plot", o.plot, "write an SVG chart of the losses and the test accuracy to FILE.svg");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, app.exit(e)};
  }
  o.optimizer = parse_optimizer(optimizer);
  o.schedule = parse_schedule(schedule);
  validate(o);
  return {o, 0};
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

}  // namespace kiln::apps::lenet
