// run_training: the epoch loop of kiln-lenet, its checkpoints (Note [Exact
// resume]) and its Ctrl-C handling.
#include "apps/lenet/trainer.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "apps/common/checkpoint_fields.h"
#include "apps/common/jsonl.h"
#include "apps/common/pipeline_training.h"
#include "apps/common/progress.h"
#include "apps/common/run_setup.h"
#include "apps/common/sharded_training.h"
#include "apps/lenet/data_parallel.h"
#include "apps/lenet/data_source.h"
#include "apps/lenet/plot.h"
#include "autograd/autocast.h"
#include "distributed/data_parallel.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/ddp/training_helpers.h"
#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "kiln.h"
#include "nn/models/lenet.h"
#include "optim/grad_scaler.h"
#include "quant/adam8bit.h"
#include "tensor/cuda_status.h"

namespace kiln::apps::lenet {

namespace F = nn::functional;
namespace pp = distributed::pipeline;

namespace {

// The test set is evaluated in larger batches than training uses: no
// gradients are kept, and larger GEMMs run faster.
constexpr int64_t kMinTestBatch = 256;

// The settings a checkpoint must share with the run that resumes it. The
// batch size and the processes are checked apart: another world size may
// resume a run (Note [Resuming on another world size]).
std::string recipe(const TrainerOptions& o) {
  // LeNet's recipes read as they did before --model, so that its checkpoints resume.
  return (o.model == "lenet" ? "" : o.model + ", ") + "epochs " + std::to_string(o.epochs) + ", " + to_string(o.optimizer) + " lr " + exact_text(o.lr) + " momentum " + exact_text(o.momentum) + " weight decay " +
         exact_text(o.weight_decay) + ", schedule " + to_string(o.schedule) + ", augment " + (o.augment ? "on" : "off") +
         ", seed " + std::to_string(o.seed) + (o.amp ? ", amp" : "") +
         (o.accum_steps > 1 ? ", accum steps " + std::to_string(o.accum_steps) : "") + (o.dp ? ", dp" : "");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerOptions& o, const std::vector<Tensor>& params) {
  switch (o.optimizer) {
    case OptimizerKind::SGD:
      return std::make_unique<optim::SGD>(params,
                                          optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
    case OptimizerKind::Adam:
      return std::make_unique<optim::Adam>(params, optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
    case OptimizerKind::AdamW:
      return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
    case OptimizerKind::Adam8bit:
      return std::make_unique<quant::Adam8bit>(params, quant::Adam8bitOptions(o.lr).weight_decay(o.weight_decay));
    case OptimizerKind::AdamW8bit:
      return std::make_unique<quant::AdamW8bit>(params, quant::AdamW8bitOptions(o.lr).weight_decay(o.weight_decay));
  }
  return nullptr;
}

// Stepped once per batch, over all epochs.
std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainerOptions& o, optim::Optimizer& optimizer,
                                                   int64_t total_steps) {
  switch (o.schedule) {
    case ScheduleKind::None: return nullptr;
    case ScheduleKind::Cosine: return std::make_unique<optim::CosineAnnealingLR>(optimizer, total_steps);
    case ScheduleKind::OneCycle: return std::make_unique<optim::OneCycleLR>(optimizer, o.lr, total_steps);
  }
  return nullptr;
}

// Where a run is: what a checkpoint's extra strings hold beside the model,
// optimizer and scheduler.
struct Position {
  int64_t epoch = 0;          // the epoch in progress, 0-based
  int64_t step_in_epoch = 0;  // its batches already done (per rank)
  double loss_sum = 0;        // of those batches: sum of loss * batch size (over all ranks when saved)
  int64_t images = 0;         // (over all ranks when saved)
  double seconds = 0;
  std::vector<EpochRecord> history = {};
  // The processes whose padded order the epoch in progress follows (Note
  // [Resuming on another world size]).
  int64_t order_replicas = 1;
};

// The shape of the run that wrote a checkpoint (Note [Resuming on another world size]).
struct SavedWorld {
  int64_t world_size = 1;
  int64_t batch_size = 0;    // per process
  int64_t train_images = 0;  // the training set's size
};

std::map<std::string, std::string> to_extra(const Position& p, const TrainerOptions& o, const SavedWorld& w) {
  return {{"recipe", recipe(o)},
          {"epoch", std::to_string(p.epoch)},
          {"step_in_epoch", std::to_string(p.step_in_epoch)},
          {"epoch_loss_sum", exact_text(p.loss_sum)},
          {"epoch_images", std::to_string(p.images)},
          {"epoch_seconds", exact_text(p.seconds)},
          {"epoch_order_replicas", std::to_string(p.order_replicas)},
          {"world_size", std::to_string(w.world_size)},
          {"batch_size", std::to_string(w.batch_size)},
          {"train_images", std::to_string(w.train_images)},
          {"history", history_to_json(p.history)}};
}

Position from_extra(const std::map<std::string, std::string>& extra, const TrainerOptions& o, SavedWorld& world) {
  const CheckpointFields f(extra, o.resume, "kiln-lenet");
  f.check_recipe(recipe(o));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Position p;
  p.epoch = f.integer("epoch", 0, o.epochs);
  p.step_in_epoch = f.integer("step_in_epoch", 0, kMax);
  p.loss_sum = f.number("epoch_loss_sum");
  p.images = f.integer("epoch_images", 0, kMax);
  p.seconds = f.number("epoch_seconds");
  p.order_replicas = f.integer("epoch_order_replicas", 1, std::numeric_limits<int>::max());
  world.world_size = f.integer("world_size", 1, std::numeric_limits<int>::max());
  world.batch_size = f.integer("batch_size", 1, kMax / world.world_size);
  world.train_images = f.integer("train_images", 1, kMax);
  p.history = f.parsed("history", history_from_json);
  KILN_CHECK(static_cast<int64_t>(p.history.size()) == p.epoch, "--resume '", o.resume,
             "': checkpoint field 'history' holds ", p.history.size(), " epochs but field 'epoch' says ", p.epoch,
             " are done");
  return p;
}

// Whether this run can continue `saved`'s: the same training set and global
// batch; an interrupted epoch whose order splits over this run's ranks.
// Returns the epoch to finish in the saved order, if any (Note [Resuming on
// another world size]).
CarriedEpoch check_world(const SavedWorld& saved, const Position& p, const TrainerOptions& o,
                         const DataParallelRun& dp, int64_t train_images) {
  KILN_CHECK(saved.train_images == train_images, "--resume '", o.resume, "': the checkpoint was trained on ",
             saved.train_images, " images but --data '", o.data, "' holds ", train_images);
  const int64_t saved_global = saved.world_size * saved.batch_size;
  const int64_t global = dp.world_size * o.batch_size;
  auto processes = [](int64_t n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); };
  KILN_CHECK(global == saved_global, "--resume '", o.resume, "': the checkpoint was made by ",
             processes(saved.world_size), " with --batch-size ", saved.batch_size, " (global batch ", saved_global,
             "); this run has ", processes(dp.world_size), " with --batch-size ", o.batch_size, " (global batch ",
             global, "). ",
             saved_global % dp.world_size == 0
                 ? "To continue it on " + processes(dp.world_size) + ", use --batch-size " +
                       std::to_string(saved_global / dp.world_size)
                 : "A global batch of " + std::to_string(saved_global) + " does not split evenly over " +
                       processes(dp.world_size));
  if (p.step_in_epoch == 0 || p.order_replicas == dp.world_size) return {};
  const int64_t order = padded_order_size(train_images, p.order_replicas);
  KILN_CHECK(order % dp.world_size == 0, "--resume '", o.resume, "': the checkpoint stopped in epoch ", p.epoch + 1,
             ", whose order of ", order, " images (", train_images, " padded for ", processes(p.order_replicas),
             ") does not split evenly over ", processes(dp.world_size), "; resume it on a number of processes that ",
             "divides both ", order, " and the global batch ", saved_global, ", or from a checkpoint at an epoch's end");
  return {.epoch = p.epoch, .replicas = p.order_replicas};
}

// The model's weights from a kiln-lenet checkpoint ("model." entries) or a
// plain state dict, for --eval-only.
void load_weights(nn::Module& model, const std::string& title, const std::string& path) {
  TensorDict file = load_safetensors(path);
  TensorDict weights;
  bool checkpoint = false;
  for (const auto& [name, tensor] : file) checkpoint = checkpoint || name.starts_with("model.");
  for (const auto& [name, tensor] : file) {
    if (!checkpoint) weights.insert(name, tensor);
    else if (name.starts_with("model.")) weights.insert(name.substr(6), tensor);
  }
  try {
    model.load_state_dict(weights);
  } catch (const Error& e) {
    KILN_CHECK(false, "'", path, "' does not hold ", title, " weights: ", e.message());
  }
}

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f%%", 100.0 * fraction);
  return buffer;
}

std::string summary(const EpochRecord& r, int64_t epochs) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer,
                "epoch %lld/%lld  train loss %.4f  test loss %.4f  test accuracy %s  lr %.3g  %.1f s  %.0f img/s  "
                "elapsed %s",
                static_cast<long long>(r.epoch), static_cast<long long>(epochs), r.train_loss, r.test_loss,
                percent(r.test_accuracy).c_str(), r.lr, r.seconds, r.images_per_second,
                format_duration(r.elapsed_seconds).c_str());
  return buffer;
}

// Replaces this rank's loss sum and image count of the epoch in progress by
// their sums over every rank (a collective under DDP).
void sum_over_ranks(Position& pos, const DataParallelRun& dp) {
  if (!dp.group) return;
  std::vector<double> sums = {pos.loss_sum, static_cast<double>(pos.images)};
  distributed::all_reduce_sum(sums, *dp.group);  // float64: counts exact up to 2^53
  pos.loss_sum = sums[0];
  pos.images = static_cast<int64_t>(sums[1]);
}

// The record of the epoch `pos` has just finished (its sums over every rank).
EpochRecord epoch_record(const Position& pos, const Evaluation& evaluation, double lr, double elapsed_seconds) {
  const double images = static_cast<double>(pos.images);
  return {.epoch = pos.epoch + 1,
          .train_loss = images > 0 ? pos.loss_sum / images : 0.0,
          .test_loss = evaluation.loss,
          .test_accuracy = evaluation.accuracy,
          .lr = lr,
          .seconds = pos.seconds,
          .images_per_second = pos.seconds > 0 ? images / pos.seconds : 0.0,
          .elapsed_seconds = elapsed_seconds};
}

// This rank's training batches; `carried` finishes a resumed epoch in the
// saved run's order (Note [Resuming on another world size]).
std::unique_ptr<data::DataLoader> make_train_loader(const Datasets& data, const TrainerOptions& o,
                                                    const DataParallelRun& dp, const CarriedEpoch& carried) {
  data::DataLoaderOptions options;
  options.batch_size = o.batch_size;
  options.sampler = train_sampler(dp, data.train->size(), o.seed, carried);
  options.shuffle = options.sampler == nullptr;
  options.num_workers = o.workers;
  options.seed = o.seed;
  options.pin_memory = Device(o.device).is_cuda();
  return std::make_unique<data::DataLoader>(data.train, options);
}

// Restores `state` and the global step from --resume and returns the
// position it holds; replaces `loader` by one that finishes a carried epoch
// (Note [Resuming on another world size]).
Position resume(const TrainerOptions& o, const DataParallelRun& dp, const Datasets& data,
                const optim::TrainingState& state, std::unique_ptr<data::DataLoader>& loader, int64_t& global_step) {
  const optim::LoadedCheckpoint loaded = optim::load_training_checkpoint(o.resume, state);
  SavedWorld saved;
  Position pos = from_extra(loaded.extra, o, saved);
  const CarriedEpoch carried = check_world(saved, pos, o, dp, data.train->size());
  if (carried.epoch >= 0) loader = make_train_loader(data, o, dp, carried);
  pos.order_replicas = carried.epoch >= 0 ? carried.replicas : dp.world_size;
  // The saved sums are over every rank; rank 0 carries them on, so that the
  // epoch's all_reduce counts them once.
  if (!dp.is_main()) {
    pos.loss_sum = 0;
    pos.images = 0;
  }
  global_step = loaded.step;
  return pos;
}

// After an epoch (rank 0), once the checkpoint is written: the log and the
// plot. A chart that cannot be written is warned about and the run goes on:
// it is redrawn whole after the next epoch.
void write_epoch_outputs(const TrainerOptions& o, const Position& pos, std::ostream& err) {
  if (!o.log.empty()) append_jsonl(o.log, to_json_line(pos.history.back()));
  if (o.plot.empty()) return;
  try {
    write_plot_svg(o.plot, pos.history);
  } catch (const Error& e) {
    err << "kiln-lenet: warning: " << e.message() << "; training goes on\n" << std::flush;
  }
}

using Clock = std::chrono::steady_clock;

// Everything a run holds, set up step by step by the helpers below and used
// by run_training's epoch loop.
struct Run {
  Run(const TrainerOptions& options, const TrainerHooks& hooks);

  const TrainerOptions& o;
  const Clock::time_point start = Clock::now();
  DataParallelRun dp;
  DiscardingStream silent;
  std::ostream* out;  // rank 0: hooks.out; the others: silent
  std::ostream* err;
  std::ostream* rank_out;  // hooks.out on every rank: the memory lines
  bool interactive;
  std::function<bool(int64_t)> should_stop;
  Device device;
  TrainingResult result;

  // What the training steps call: the model, or DataParallel, DDP or FSDP around it.
  std::shared_ptr<distributed::DistributedDataParallel> ddp;
  std::shared_ptr<distributed::DataParallel> data_parallel;
  std::shared_ptr<distributed::fsdp::FullyShardedDataParallel> fsdp;
  nn::Module* trained = nullptr;
  int64_t parameters = 0;  // counted before FSDP shards them
  // --pp (Note [Trainers under pipeline parallelism]): LeNet's Sequential
  // cut into stages (all of them: every rank keeps the whole model and
  // gathers the other ranks' stages into it to evaluate), this rank's, a
  // Sequential holding those (the memory lines), the training pipeline and,
  // by micro-batch count, the fill-drain ones for batches too small for its
  // micro-batches. Every rank reads the whole of every training batch, as
  // one process does: train_dp().
  std::vector<std::shared_ptr<nn::Module>> all_stages;
  std::map<int, std::shared_ptr<nn::Module>> stages;
  std::shared_ptr<nn::Sequential> held;
  std::vector<int64_t> modules_per_stage;
  std::unique_ptr<pp::Pipeline> pipe;
  std::map<int64_t, std::unique_ptr<pp::Pipeline>> small_batch_pipes;
  DataParallelRun one_process;
  const DataParallelRun& train_dp() const { return pipe ? one_process : dp; }

  Datasets data;
  std::unique_ptr<data::DataLoader> test_loader;
  std::unique_ptr<data::DataLoader> train_loader;
  int64_t batches_per_epoch = 0;  // an optimizer step takes accum_steps of them
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LRScheduler> scheduler;
  DType amp_dtype = DType::BFloat16;
  // A disabled scaler passes the loss and the step through unchanged.
  optim::GradScaler scaler;

  Position pos;
  int64_t global_step = 0;
  double elapsed_before = 0;  // the wall time of the run a resume continues

  // Between steps under FSDP its parameters are this rank's shards.
  nn::Module& model() { return *result.model; }
  // Under FSDP through the wrapper, as often on every rank (Note [Trainers under FSDP]).
  // Under --pp on the whole model, the stages gathered to every rank first;
  // each rank evaluates its share of the test set, as under --ddp.
  Evaluation evaluate_test_set() {
    const int64_t classes = static_cast<int64_t>(data.class_names.size());
    if (pipe) gather_stages(stages, all_stages, pipe->schedule(), *dp.group);
    if (!fsdp) return combine_evaluations(evaluate(model(), *test_loader, device, classes), dp);
    const int64_t batches = test_batches_per_rank(dp, data.test->size(), test_loader->options().batch_size);
    return combine_evaluations(evaluate(*fsdp, *test_loader, device, classes, batches), dp);
  }
  // Under DDP every rank must stop at the same step (Note [kiln-lenet with DDP]).
  bool stop_now(bool at_check_point) {
    if (!dp.group) return should_stop(global_step);
    if (!at_check_point) return false;
    return distributed::any_rank_wants(should_stop(global_step), *dp.group);
  }
  // Rank 0 writes the checkpoint (Note [kiln-lenet with DDP]); under FSDP
  // every rank calls this, to gather the model and optimizer state.
  void save() {
    if (o.save.empty()) return;
    const SavedWorld world{.world_size = dp.world_size, .batch_size = o.batch_size,
                           .train_images = data.train->size()};
    if (fsdp) {
      save_gathered_training_checkpoint(o.save, *fsdp, *optimizer, scheduler.get(), global_step,
                                        to_extra(pos, o, world), &scaler);
      return;
    }
    if (!dp.is_main()) return;
    SavingCheckpoint saving(o.save);
    optim::save_training_checkpoint(
        o.save, {model(), *optimizer, scheduler.get(), global_step, to_extra(pos, o, world), &scaler});
  }
};

// Validates the options, joins the process group (--ddp) and tries the
// outputs before anything is read.
Run::Run(const TrainerOptions& options, const TrainerHooks& hooks)
    : o((validate(options), options)),
      dp(start_data_parallel(o)),
      out(dp.is_main() ? hooks.out : &silent),
      err(dp.is_main() ? hooks.err : &silent),
      rank_out(hooks.out),
      interactive(hooks.interactive),
      should_stop(hooks.should_stop ? hooks.should_stop : [](int64_t) { return interrupt_requested(); }),
      scaler({.enabled = o.amp && Device(o.device).is_cuda()}),
      pos{.order_replicas = dp.world_size} {
  if (!o.eval_only) check_outputs_on_main({{"--save", o.save}, {"--log", o.log}, {"--plot", o.plot}}, dp);
  if (o.threads > 0) set_num_threads(o.threads);
  if (dp.is_main()) warn_if_oversubscribed(*err, "kiln-lenet", dp.local_world_size);
  device = Device(o.device);
  amp_dtype = autocast_dtype(device);
}

// The --model network, on its device before the data is read (a device that cannot
// run fails fast), and the wrapper the steps call (--dp, --ddp; DDP takes
// rank 0's weights, the same here since every rank seeds alike). FSDP
// wraps it later, once the optimizer holds its state (wrap_in_fsdp).
void set_up_model(Run& run) {
  const TrainerOptions& o = run.o;
  manual_seed(o.seed);
  run.result.model = make_model(o.model);
  run.model().to(run.device);
  run.trained = &run.model();
  for (const Tensor& p : run.model().parameters()) run.parameters += p.numel();
  if (o.dp) {
    std::vector<Device> devices;
    const int64_t count = run.device.is_cuda() ? cuda::device_count() : o.replicas;
    for (int64_t i = 0; i < count; ++i) {
      devices.push_back(run.device.is_cuda() ? cuda_device(static_cast<int>(i)) : kCPU);
    }
    run.data_parallel = std::make_shared<distributed::DataParallel>(
        run.result.model, [name = o.model] { return make_model(name); }, devices);
    run.trained = run.data_parallel.get();
  }
  if (run.dp.group && o.ddp) {
    distributed::DDPOptions ddp_options;
    ddp_options.group = run.dp.group;
    run.ddp = std::make_shared<distributed::DistributedDataParallel>(run.result.model, ddp_options);
    run.trained = run.ddp.get();
  }
}

// --pp: LeNet as a Sequential (the model's own modules) cut into the
// schedule's stages balanced by parameter count, this rank's kept for the
// pipeline (Note [Trainers under pipeline parallelism]).
void split_model(Run& run) {
  const TrainerOptions& o = run.o;
  check_pipeline_world_size(o.pp, run.dp.world_size, "kiln-lenet");
  const pp::Schedule schedule = training_schedule(pipeline_flags(o), o.batch_size);
  const std::shared_ptr<nn::Sequential> seq = std::dynamic_pointer_cast<nn::LeNet>(run.result.model)->as_sequential();
  run.modules_per_stage = pp::balance_by_parameters(*seq, schedule.num_stages);
  run.all_stages = pp::split_sequential(*seq, run.modules_per_stage);
  run.held = std::make_shared<nn::Sequential>();
  for (int s : schedule.stages_of(run.dp.rank)) {
    run.stages[s] = run.all_stages[s];
    run.held->push_back(run.all_stages[s]);
  }
  run.pipe = std::make_unique<pp::Pipeline>(
      schedule, run.stages, [](const nn::TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); },
      run.dp.group);
  std::string balance;
  for (int64_t n : run.modules_per_stage) balance += (balance.empty() ? "" : " ") + std::to_string(n);
  KILN_CHECK(!run.pipe->parameters().empty(), "--pp ", o.pp, ": the stages of rank ", run.dp.rank,
             " hold no parameters (modules per stage by parameter count: ", balance, "); use fewer stages");
  run.trained = nullptr;  // the steps go through the pipeline
}

// The pipeline for a batch of `rows`: the training one, or for a batch too
// small for its micro-batches (an epoch's last) a fill-drain pipeline over
// the same stages with as many as the batch gives.
pp::Pipeline& pipeline_for(Run& run, int64_t rows) {
  const int64_t full = run.pipe->schedule().num_micro_batches;
  const int64_t m = micro_batches_for(rows, full);
  if (m == full) return *run.pipe;
  std::unique_ptr<pp::Pipeline>& small = run.small_batch_pipes[m];
  if (!small) {
    small = std::make_unique<pp::Pipeline>(
        fill_drain_schedule(run.pipe->schedule(), static_cast<int>(m)), run.stages,
        [](const nn::TensorList& out, const Tensor& y) { return F::cross_entropy(out[0], y); }, run.dp.group);
  }
  return *small;
}

// The data sets and the test loader (larger batches than training: no
// gradients are kept, and larger GEMMs run faster).
void open_data(Run& run) {
  const TrainerOptions& o = run.o;
  run.data = open_datasets(o.data, o.augment && !o.eval_only, o.seed);
  run.result.class_names = run.data.class_names;
  data::DataLoaderOptions test_options;
  test_options.batch_size = std::max(o.batch_size, kMinTestBatch);
  test_options.pin_memory = run.device.is_cuda();  // uploads that do not wait (Note [Normalizing whole batches])
  test_options.num_workers = std::min<int64_t>(o.workers, 1);
  test_options.sampler = test_sampler(run.dp, run.data.test->size());
  run.test_loader = std::make_unique<data::DataLoader>(run.data.test, test_options);
}

// --eval-only: the model of --resume or --weights on the test set, and the per-class table.
TrainingResult evaluate_only(Run& run) {
  const TrainerOptions& o = run.o;
  const std::string& path = o.resume.empty() ? o.weights : o.resume;
  load_weights(run.model(), model_title(o.model), path);
  *run.out << "evaluating " << path << " on " << run.data.description << " (" << run.data.test->size()
           << " test images)\n";
  run.result.evaluation =
      evaluate(run.model(), *run.test_loader, run.device, static_cast<int64_t>(run.data.class_names.size()));
  *run.out << "test loss " << run.result.evaluation.loss << "  test accuracy "
           << percent(run.result.evaluation.accuracy) << "\n\n"
           << format_class_table(run.result.evaluation, run.data.class_names) << std::flush;
  run.result.status = RunStatus::Evaluated;
  return run.result;
}

// --fsdp: shards the model, whose optimizer (and a resumed run's state) was
// made over the full parameters, and then the optimizer's state (Note
// [Trainers under FSDP]).
void wrap_in_fsdp(Run& run) {
  distributed::fsdp::FSDPOptions options;
  options.group = run.dp.group;
  options.strategy = distributed::fsdp::parse_sharding_strategy(run.o.fsdp_strategy);
  options.wrap_policy = distributed::fsdp::wrap_by_numel(kFsdpUnitNumel);
  run.fsdp = std::make_shared<distributed::fsdp::FullyShardedDataParallel>(run.result.model, options);
  run.trained = run.fsdp.get();
  shard_optimizer_state(*run.fsdp, *run.optimizer);
}

// The training loader, optimizer and schedule, and the position: from
// --resume (Note [Exact resume]), or the start with a fresh log.
void set_up_training(Run& run) {
  const TrainerOptions& o = run.o;
  run.train_loader = make_train_loader(run.data, o, run.train_dp(), {});
  run.batches_per_epoch = run.train_loader->size();
  const int64_t steps_per_epoch = (run.batches_per_epoch + o.accum_steps - 1) / o.accum_steps;
  run.optimizer = make_optimizer(o, run.pipe ? run.pipe->parameters() : run.model().parameters());
  run.scheduler = make_scheduler(o, *run.optimizer, o.epochs * steps_per_epoch);
  if (!o.resume.empty()) {
    run.pos = resume(o, run.dp, run.data, {run.model(), *run.optimizer, run.scheduler.get(), 0, {}, &run.scaler},
                     run.train_loader, run.global_step);
    // The interrupted epoch's training time after the last finished epoch
    // is not in the history; its `seconds` resume the epoch's own clock.
    run.elapsed_before = (run.pos.history.empty() ? 0.0 : run.pos.history.back().elapsed_seconds) + run.pos.seconds;
    *run.out << "resuming " << o.resume << " at epoch " << run.pos.epoch + 1 << ", step " << run.pos.step_in_epoch
             << "/" << run.batches_per_epoch << "\n";
  } else if (!o.log.empty() && run.dp.is_main()) {
    start_jsonl(o.log);
  }
  if (o.fsdp) wrap_in_fsdp(run);
}

void print_header(Run& run) {
  const TrainerOptions& o = run.o;
  std::ostream& out = *run.out;
  out << model_title(o.model) << " (" << run.parameters << " parameters) on " << run.data.description << ": " << run.data.train->size()
      << " training, " << run.data.test->size() << " test images\n"
      << recipe(o) << ", " << o.workers << " loader workers, " << get_num_threads() << " threads, device "
      << run.device.str() << (o.amp ? ", mixed precision " + std::string(dtype_name(run.amp_dtype)) : std::string());
  if (run.data_parallel) out << ", DataParallel over " << run.data_parallel->devices().size() << " replicas";
  if (run.pipe) {
    const pp::Schedule& s = run.pipe->schedule();
    out << ", pipeline of " << s.num_stages << " stages over " << run.dp.world_size << " processes ("
        << run.dp.group->backend_name() << "), schedule " << s.name << ", " << s.num_micro_batches
        << " micro-batches, modules per stage";
    for (int64_t n : run.modules_per_stage) out << " " << n;
  } else if (run.dp.group) {
    out << ", " << run.dp.world_size << " processes (" << run.dp.group->backend_name() << "), global batch "
        << o.batch_size * run.dp.world_size;
  }
  if (run.fsdp) {
    out << ", FSDP " << distributed::fsdp::sharding_strategy_name(run.fsdp->options().strategy) << " in "
        << run.fsdp->units().size() << " units";
  }
  out << "\n";
}

// Under --ddp and --fsdp every rank prints what it holds (Note [Trainers
// under FSDP]) before the first step, then restarts the allocator's peak so
// that the line at the end shows training's.
void print_memory_at_start(Run& run) {
  if (!run.dp.group) return;
  const nn::Module& held = run.held ? static_cast<const nn::Module&>(*run.held) : run.model();
  print_memory_line(*run.rank_out, run.dp.rank, "at the start", held, run.optimizer.get(), run.device);
  reset_peak_memory(run.device);
}

// Skips the batches of the epoch in progress that a resumed run already trained on.
void skip_done_batches(Run& run) {
  for (int64_t skipped = 0; skipped < run.pos.step_in_epoch; ++skipped) {
    KILN_CHECK(run.train_loader->next().has_value(), "--resume '", run.o.resume, "': the checkpoint is at step ",
               run.pos.step_in_epoch, " of an epoch that has only ", run.batches_per_epoch, " steps");
  }
}

// The forward and backward of one optimizer step's `micro` batches (Note
// [kiln-lenet with DDP]): gradients accumulate, each loss divided by micro.
// Returns the images trained on.
int64_t forward_backward(Run& run, int64_t micro, RunningLossSum& loss_sum) {
  int64_t images_done = 0;
  for (int64_t m = 0; m < micro; ++m) {
    std::optional<data::Batch> batch = run.train_loader->next();
    KILN_CHECK(batch.has_value(), "kiln-lenet: the loader ended after ", run.pos.step_in_epoch, " of ",
               run.batches_per_epoch, " batches");
    Tensor images = normalize_batch(batch->data.to(run.device));  // (B, 3, 32, 32) float32
    Tensor labels = batch->target.to(run.device);                  // (B) int64
    if (run.pipe) {
      // The whole batch through the pipeline (--accum-steps is 1): stage 0's
      // rank reads the images, the last stage's the labels; the loss comes
      // from the last stage's rank.
      const Tensor loss = pipeline_for(run, labels.size(0)).step({images}, labels);
      ++run.pos.step_in_epoch;
      loss_sum.add(loss_from_last_stage(loss, *run.pipe, *run.dp.group), labels.size(0));
      run.pos.images += labels.size(0);
      images_done += labels.size(0);
      continue;
    }
    Tensor loss;
    {
      AutocastGuard autocast(run.device.type, run.amp_dtype, run.o.amp);
      loss = F::cross_entropy((*run.trained)(images), labels);
    }
    Tensor scaled = run.scaler.scale(micro > 1 ? loss / static_cast<double>(micro) : loss);
    if (run.ddp && m + 1 < micro) {
      auto no_sync = run.ddp->no_sync();
      scaled.backward();
    } else if (run.fsdp && m + 1 < micro) {
      auto no_sync = run.fsdp->no_sync();
      scaled.backward();
    } else {
      scaled.backward();
    }
    ++run.pos.step_in_epoch;
    const int64_t batch_images = labels.size(0);
    loss_sum.add(loss, batch_images);
    run.pos.images += batch_images;
    images_done += batch_images;
  }
  return images_done;
}

// Trains the rest of epoch pos.epoch. Returns false when asked to stop: the
// position (summed over the ranks) is then saved.
bool train_epoch(Run& run) {
  Position& pos = run.pos;
  run.data.train->set_epoch(static_cast<uint64_t>(pos.epoch));
  run.train_loader->begin_epoch(pos.epoch);
  skip_done_batches(run);
  const std::string label = "epoch " + std::to_string(pos.epoch + 1) + "/" + std::to_string(run.o.epochs);
  ProgressLine progress(*run.out, run.interactive, label, run.batches_per_epoch, pos.step_in_epoch);
  if (run.device.is_cuda()) progress.show_gpu(run.device.index);
  const Clock::time_point start = Clock::now();
  const double seconds_before = pos.seconds;
  int64_t images_this_run = 0;
  RunningLossSum loss_sum(pos.loss_sum);
  while (pos.step_in_epoch < run.batches_per_epoch) {
    run.optimizer->zero_grad();
    images_this_run +=
        forward_backward(run, std::min(run.o.accum_steps, run.batches_per_epoch - pos.step_in_epoch), loss_sum);
    run.scaler.step(*run.optimizer);
    run.scaler.update();
    if (run.scheduler) run.scheduler->step();
    ++run.global_step;
    pos.seconds = seconds_before + std::chrono::duration<double>(Clock::now() - start).count();
    progress.update(
        pos.step_in_epoch, [&] { return loss_sum.read() / static_cast<double>(pos.images); },
        images_this_run * run.train_dp().world_size);
    if (run.stop_now(run.global_step % kStopCheckSteps == 0)) {
      progress.finish();
      pos.loss_sum = loss_sum.read();
      sum_over_ranks(pos, run.train_dp());  // every rank stops here together
      run.save();
      return false;
    }
  }
  progress.finish();
  pos.loss_sum = loss_sum.read();  // the device finished the epoch's steps: their time is complete
  pos.seconds = seconds_before + std::chrono::duration<double>(Clock::now() - start).count();
  return true;
}

// After an epoch's steps: the test pass, the summary line, and (rank 0) the
// checkpoint of the position at the next epoch's start, the log and the chart.
void finish_epoch(Run& run) {
  Position& pos = run.pos;
  run.result.evaluation = run.evaluate_test_set();
  sum_over_ranks(pos, run.train_dp());  // under --pp every rank has the whole sums
  const double elapsed = run.elapsed_before + std::chrono::duration<double>(Clock::now() - run.start).count();
  pos.history.push_back(epoch_record(pos, run.result.evaluation, run.optimizer->lr(0), elapsed));
  *run.out << summary(pos.history.back(), run.o.epochs) << "\n" << std::flush;
  // The position after this epoch: the next one, from its first step, in
  // this run's order.
  pos = {.epoch = pos.epoch + 1, .history = std::move(pos.history), .order_replicas = run.dp.world_size};
  run.save();  // first, so that the log and the plot never cost the checkpoint
  if (run.dp.is_main()) write_epoch_outputs(run.o, pos, *run.err);
  --pos.epoch;
}

// The end of training: every rank's memory line and, under FSDP, the model
// the run returns, a plain model with the gathered parameters.
void end_training(Run& run) {
  if (run.dp.group) {
    const nn::Module& held = run.held ? static_cast<const nn::Module&>(*run.held) : run.model();
    print_memory_line(*run.rank_out, run.dp.rank, "at the end", held, run.optimizer.get(), run.device);
  }
  // Under --pp the run returns the whole model on every rank.
  if (run.pipe) gather_stages(run.stages, run.all_stages, run.pipe->schedule(), *run.dp.group);
  if (!run.fsdp) return;
  auto plain = make_model(run.o.model);
  plain->to(run.device);
  load_gathered_state(*run.fsdp, *plain);
  run.result.model = plain;
}

// Stops the run at its position (its checkpoint, if any, already written).
TrainingResult interrupted(Run& run, const std::string& where) {
  end_training(run);
  *run.out << "interrupted " << where;
  if (!run.o.save.empty()) {
    *run.out << "; checkpoint saved to " << run.o.save << " (continue with --resume " << run.o.save << ")";
  }
  *run.out << "\n" << std::flush;
  run.result.status = RunStatus::Interrupted;
  run.result.history = run.pos.history;
  run.result.epoch = run.pos.epoch;
  run.result.step_in_epoch = run.pos.step_in_epoch;
  run.result.global_step = run.global_step;
  finish_data_parallel(run.dp);
  return run.result;
}

// The final per-class table (a run resumed from its final checkpoint trained
// no epoch: it evaluates here).
TrainingResult finished(Run& run) {
  if (run.pos.history.empty() || run.result.evaluation.images == 0) run.result.evaluation = run.evaluate_test_set();
  end_training(run);
  *run.out << "\ntest accuracy per class after " << run.o.epochs << (run.o.epochs == 1 ? " epoch:\n" : " epochs:\n")
           << format_class_table(run.result.evaluation, run.data.class_names) << std::flush;
  run.result.status = RunStatus::Finished;
  run.result.history = run.pos.history;
  run.result.epoch = run.o.epochs;
  run.result.global_step = run.global_step;
  finish_data_parallel(run.dp);
  return run.result;
}

}  // namespace

TrainingResult run_training(const TrainerOptions& o, const TrainerHooks& hooks) {
  Run run(o, hooks);
  set_up_model(run);
  if (o.pp > 0) split_model(run);
  open_data(run);
  if (o.eval_only) return evaluate_only(run);
  set_up_training(run);
  print_header(run);
  print_memory_at_start(run);
  Position& pos = run.pos;
  for (; pos.epoch < o.epochs; ++pos.epoch) {
    if (!train_epoch(run)) {
      return interrupted(run, "at epoch " + std::to_string(pos.epoch + 1) + ", step " +
                                  std::to_string(pos.step_in_epoch) + "/" + std::to_string(run.batches_per_epoch));
    }
    finish_epoch(run);
    // A Ctrl-C during the test pass stops here, where the checkpoint just
    // written already holds the position.
    if (pos.epoch + 1 < o.epochs && run.stop_now(true)) {
      ++pos.epoch;
      return interrupted(run, "after epoch " + std::to_string(pos.epoch));
    }
  }
  return finished(run);
}

}  // namespace kiln::apps::lenet
