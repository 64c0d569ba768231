// run_training: the epoch loop of kiln-lenet, its checkpoints (Note [Exact
// resume]) and its Ctrl-C handling.
#include "apps/lenet/trainer.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "apps/lenet/data_parallel.h"
#include "apps/lenet/data_source.h"
#include "apps/lenet/plot.h"
#include "apps/lenet/progress.h"
#include "autograd/autocast.h"
#include "distributed/data_parallel.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/ddp/training_helpers.h"
#include "kiln.h"
#include "optim/grad_scaler.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::apps::lenet {

namespace F = nn::functional;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
// While a checkpoint is written: set, with its temporary file's name in
// g_save_temp (written before the flag is set, read only by the handler).
volatile std::sig_atomic_t g_saving = 0;
char g_save_temp[4096];

// The first signal asks the run to stop at its next step. A second one ends
// the process as the signal does by default; during a save it first removes
// the temporary file, which no destructor will (the previous checkpoint
// stays intact: the rename had not happened). Only async-signal-safe calls.
void on_signal(int signal) {
  if (g_interrupted == 0) {
    g_interrupted = 1;
    return;
  }
  if (g_saving != 0) ::unlink(g_save_temp);
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal, &fallback, nullptr);
  ::raise(signal);  // delivered when this handler returns
}

// Marks the window in which a second signal must remove `path`'s temporary file.
class SavingCheckpoint {
 public:
  explicit SavingCheckpoint(const std::string& path) {
    const std::string temp = safetensors_temp_path(path);
    if (temp.size() >= sizeof g_save_temp) return;  // no room: the file is left, as before
    std::memcpy(g_save_temp, temp.c_str(), temp.size() + 1);
    g_saving = 1;
  }
  SavingCheckpoint(const SavingCheckpoint&) = delete;
  SavingCheckpoint& operator=(const SavingCheckpoint&) = delete;
  ~SavingCheckpoint() { g_saving = 0; }
};

// The test set is evaluated in larger batches than training uses: no
// gradients are kept, and larger GEMMs run faster.
constexpr int64_t kMinTestBatch = 256;

// The shortest text that reads back as exactly `v` ("0.05", not
// "0.050000000000000003"): checkpoints round-trip and the header stays readable.
std::string exact(double v) {
  char buffer[40];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return error == std::errc() ? std::string(buffer, end) : std::to_string(v);
}

// The settings a checkpoint must share with the run that resumes it. The
// batch size and the processes are checked apart: another world size may
// resume a run (Note [Resuming on another world size]).
std::string recipe(const TrainerOptions& o) {
  return "epochs " + std::to_string(o.epochs) + ", " + to_string(o.optimizer) + " lr " + exact(o.lr) + " momentum " + exact(o.momentum) + " weight decay " +
         exact(o.weight_decay) + ", schedule " + to_string(o.schedule) + ", augment " + (o.augment ? "on" : "off") +
         ", seed " + std::to_string(o.seed) + (o.amp ? ", amp" : "") +
         (o.accum_steps > 1 ? ", accum steps " + std::to_string(o.accum_steps) : "") + (o.dp ? ", dp" : "");
}

// Where rank 1 and up write what rank 0 alone prints.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerOptions& o, const std::vector<Tensor>& params) {
  switch (o.optimizer) {
    case OptimizerKind::SGD:
      return std::make_unique<optim::SGD>(
          params, optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
    case OptimizerKind::Adam:
      return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay});
    case OptimizerKind::AdamW:
      return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
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
          {"epoch_loss_sum", exact(p.loss_sum)},
          {"epoch_images", std::to_string(p.images)},
          {"epoch_seconds", exact(p.seconds)},
          {"epoch_order_replicas", std::to_string(p.order_replicas)},
          {"world_size", std::to_string(w.world_size)},
          {"batch_size", std::to_string(w.batch_size)},
          {"train_images", std::to_string(w.train_images)},
          {"history", history_to_json(p.history)}};
}

// A checkpoint's extra strings, each checked for its kind and range; errors
// name the checkpoint and the field.
class CheckpointFields {
 public:
  CheckpointFields(const std::map<std::string, std::string>& extra, const std::string& path)
      : extra_(extra), path_(path) {}

  const std::string& text(const std::string& key) const {
    auto it = extra_.find(key);
    KILN_CHECK(it != extra_.end(), "--resume '", path_, "': not a kiln-lenet checkpoint of this version (no '",
               key, "' field in its metadata)");
    return it->second;
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const {
    const std::string& s = text(key);
    int64_t value = 0;
    auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    KILN_CHECK(error == std::errc() && end == s.data() + s.size() && value >= lo && value <= hi, "--resume '",
               path_, "': checkpoint field '", key, "' is '", s, "'; expected an integer from ", lo, " to ", hi);
    return value;
  }
  double number(const std::string& key) const {
    const std::string& s = text(key);
    double value = 0;
    auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    KILN_CHECK(error == std::errc() && end == s.data() + s.size() && std::isfinite(value) && value >= 0,
               "--resume '", path_, "': checkpoint field '", key, "' is '", s,
               "'; expected a finite non-negative number");
    return value;
  }
  std::vector<EpochRecord> history(const std::string& key) const {
    try {
      return history_from_json(text(key));
    } catch (const Error& e) {
      KILN_FAIL("--resume '", path_, "': checkpoint field '", key, "' is malformed: ", e.message());
    }
  }

 private:
  const std::map<std::string, std::string>& extra_;
  const std::string& path_;
};

Position from_extra(const std::map<std::string, std::string>& extra, const TrainerOptions& o, SavedWorld& world) {
  const CheckpointFields f(extra, o.resume);
  KILN_CHECK(f.text("recipe") == recipe(o), "--resume '", o.resume, "': the checkpoint was made with ",
             f.text("recipe"), "; this run has ", recipe(o), ". Resume with the flags of the saved run");
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
  p.history = f.history("history");
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

// What kiln-lenet writes during the run, tried before it trains: a path in
// a missing or read-only folder, or naming a folder, is found in seconds
// rather than after the first epoch. The probe file is removed again.
std::string output_problem(const char* flag, const std::string& path) {
  if (path.empty()) return "";
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return std::string(flag) + " '" + path + "' is a directory";
  const std::string probe = path + ".probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return std::string(flag) + " '" + path + "': cannot create files beside it (" + std::strerror(errno) + ")";
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

// Rank 0 writes the outputs (Note [kiln-lenet with DDP]); every rank learns
// whether it can, so that none waits in a collective for a rank that quit.
void check_outputs(const TrainerOptions& o, const DataParallelRun& dp) {
  std::string problem;
  if (dp.is_main()) {
    for (auto [flag, path] : {std::pair<const char*, const std::string&>{"--save", o.save}, {"--log", o.log},
                              {"--plot", o.plot}}) {
      if (problem.empty()) problem = output_problem(flag, path);
    }
  }
  const bool failed = dp.group ? distributed::any_rank_wants(!problem.empty(), *dp.group) : !problem.empty();
  KILN_CHECK(!failed, problem.empty() ? "rank 0 cannot write its outputs (--save, --log or --plot; see its error)"
                                      : problem);
}

// The cores this process may run on (its affinity mask, as taskset sets it).
int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// More kernel threads than cores: they wait for each other at every
// barrier, and a step runs several times slower than with one per core.
void warn_if_oversubscribed(std::ostream& err, const DataParallelRun& dp) {
  const int cores = available_cores();
  const int64_t threads = static_cast<int64_t>(get_num_threads()) * dp.local_world_size;
  if (threads <= cores || !dp.is_main()) return;
  err << "kiln-lenet: warning: " << dp.local_world_size << (dp.local_world_size == 1 ? " process" : " processes")
      << " x " << get_num_threads() << " threads = " << threads << " kernel threads on " << cores
      << " cores; they will wait on each other and train several times slower. Use --threads "
      << std::max(1, cores / dp.local_world_size) << " (or OMP_NUM_THREADS)\n"
      << std::flush;
}

// An epoch's sum of loss * batch size, kept on the device the losses are
// computed on. On a GPU, reading each step's loss (item()) would make the
// host wait for the step to finish before it could queue the next one, so
// the sum is read only when it is shown or saved. The sum starts from the
// position's and adds the terms in the same order and float64 arithmetic as
// a host double would, so a resumed epoch reports the same loss.
class RunningLossSum {
 public:
  explicit RunningLossSum(double start) : start_(start) {}

  // loss: a scalar of any floating dtype.
  void add(const Tensor& loss, int64_t batch_images) {
    if (!sum_.defined()) sum_ = full({}, start_, {DType::Float64, loss.device()});
    const Tensor term = ops::mul(loss.detach().to(DType::Float64), static_cast<double>(batch_images));
    sum_ = ops::add(sum_, term);
  }
  double read() const { return sum_.defined() ? sum_.item<double>() : start_; }

 private:
  double start_;
  Tensor sum_;  // () float64 on the losses' device, from the first add on
};

// The model's weights from a kiln-lenet checkpoint ("model." entries) or a
// plain state dict, for --eval-only.
void load_weights(nn::Module& model, const std::string& path) {
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
    KILN_CHECK(false, "'", path, "' does not hold LeNet weights: ", e.message());
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

// After an epoch (rank 0): the checkpoint first, then the log and the plot,
// so that neither costs the checkpoint. A chart that cannot be written is
// warned about and the run goes on: it is redrawn whole after the next epoch.
void write_epoch_outputs(const TrainerOptions& o, const Position& pos, const std::function<void()>& save,
                         std::ostream& err) {
  if (!o.save.empty()) save();
  if (!o.log.empty()) append_jsonl(o.log, pos.history.back());
  if (o.plot.empty()) return;
  try {
    write_plot_svg(o.plot, pos.history);
  } catch (const Error& e) {
    err << "kiln-lenet: warning: " << e.message() << "; training goes on\n" << std::flush;
  }
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void ignore_file_size_signal() {
  struct sigaction action {};
  action.sa_handler = SIG_IGN;
  sigemptyset(&action.sa_mask);
  sigaction(SIGXFSZ, &action, nullptr);
}

bool interrupt_requested() { return g_interrupted != 0; }

void reset_interrupt_request() { g_interrupted = 0; }

TrainingResult run_training(const TrainerOptions& o, const TrainerHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point run_start = Clock::now();
  validate(o);
  DataParallelRun dp = start_data_parallel(o);
  if (!o.eval_only) check_outputs(o, dp);
  NullBuffer discard;
  std::ostream silent(&discard);
  std::ostream& out = dp.is_main() ? *hooks.out : silent;
  std::ostream& err = dp.is_main() ? *hooks.err : silent;
  auto should_stop = hooks.should_stop ? hooks.should_stop : [](int64_t) { return interrupt_requested(); };
  if (o.threads > 0) set_num_threads(o.threads);
  warn_if_oversubscribed(err, dp);
  const Device device(o.device);

  TrainingResult result;
  manual_seed(o.seed);
  result.model = std::make_shared<nn::LeNet>();
  nn::LeNet& model = *result.model;
  // Before the data is read: a device that cannot run fails fast.
  model.to(device);
  // What the training steps call: the model, or DDP around it (which takes
  // rank 0's weights, the same here since every rank seeds alike).
  std::shared_ptr<distributed::DistributedDataParallel> ddp;
  std::shared_ptr<distributed::DataParallel> data_parallel;
  nn::Module* trained = &model;
  if (o.dp) {
    std::vector<Device> devices;
#ifdef KILN_WITH_CUDA
    const int64_t count = device.is_cuda() ? cuda::device_count() : o.replicas;
#else
    const int64_t count = o.replicas;  // a CUDA device failed at model.to(device) above
#endif
    for (int64_t i = 0; i < count; ++i) devices.push_back(device.is_cuda() ? cuda_device(static_cast<int>(i)) : kCPU);
    data_parallel = std::make_shared<distributed::DataParallel>(
        result.model, [] { return std::make_shared<nn::LeNet>(); }, devices);
    trained = data_parallel.get();
  }
  if (dp.group) {
    distributed::DDPOptions ddp_options;
    ddp_options.group = dp.group;
    ddp = std::make_shared<distributed::DistributedDataParallel>(result.model, ddp_options);
    trained = ddp.get();
  }

  Datasets data = open_datasets(o.data, o.augment && !o.eval_only, o.seed);
  result.class_names = data.class_names;
  const int64_t num_classes = static_cast<int64_t>(data.class_names.size());
  data::DataLoaderOptions test_options;
  test_options.batch_size = std::max(o.batch_size, kMinTestBatch);
  test_options.pin_memory = device.is_cuda();  // uploads that do not wait (Note [Normalizing whole batches])
  test_options.num_workers = std::min<int64_t>(o.workers, 1);
  test_options.sampler = test_sampler(dp, data.test->size());
  data::DataLoader test_loader(data.test, test_options);
  auto run_evaluation = [&] {
    return combine_evaluations(evaluate(model, test_loader, device, num_classes), dp);
  };

  if (o.eval_only) {
    load_weights(model, o.resume.empty() ? o.weights : o.resume);
    out << "evaluating " << (o.resume.empty() ? o.weights : o.resume) << " on " << data.description << " ("
        << data.test->size() << " test images)\n";
    result.evaluation = evaluate(model, test_loader, device, num_classes);
    out << "test loss " << result.evaluation.loss << "  test accuracy " << percent(result.evaluation.accuracy)
        << "\n\n"
        << format_class_table(result.evaluation, data.class_names) << std::flush;
    result.status = RunStatus::Evaluated;
    return result;
  }

  std::unique_ptr<data::DataLoader> loader = make_train_loader(data, o, dp, {});
  // Batches per epoch; an optimizer step takes accum_steps of them.
  const int64_t batches_per_epoch = loader->size();
  const int64_t steps_per_epoch = (batches_per_epoch + o.accum_steps - 1) / o.accum_steps;
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(o, model.parameters());
  std::unique_ptr<optim::LRScheduler> scheduler = make_scheduler(o, *optimizer, o.epochs * steps_per_epoch);
  // --amp: bfloat16 has float32's exponent range and needs no loss scaling;
  // float16 does (Note [Dynamic loss scaling]). A disabled scaler passes
  // the loss and the step through unchanged.
  const DType amp_dtype = device.is_cuda() ? DType::Float16 : DType::BFloat16;
  optim::GradScaler scaler({.enabled = o.amp && device.is_cuda()});

  Position pos{.order_replicas = dp.world_size};
  int64_t global_step = 0;
  double elapsed_before = 0;  // the wall time of the run a resume continues
  if (!o.resume.empty()) {
    pos = resume(o, dp, data, {model, *optimizer, scheduler.get(), 0, {}, &scaler}, loader, global_step);
    // The interrupted epoch's training time after the last finished epoch
    // is not in the history; its `seconds` resume the epoch's own clock.
    elapsed_before = (pos.history.empty() ? 0.0 : pos.history.back().elapsed_seconds) + pos.seconds;
    out << "resuming " << o.resume << " at epoch " << pos.epoch + 1 << ", step " << pos.step_in_epoch << "/"
        << batches_per_epoch << "\n";
  } else if (!o.log.empty() && dp.is_main()) {
    start_jsonl(o.log);
  }
  data::DataLoader& train_loader = *loader;
  const SavedWorld world{.world_size = dp.world_size, .batch_size = o.batch_size, .train_images = data.train->size()};
  auto save = [&]() {
    if (!dp.is_main()) return;  // Note [kiln-lenet with DDP]
    SavingCheckpoint saving(o.save);
    optim::save_training_checkpoint(
        o.save, {model, *optimizer, scheduler.get(), global_step, to_extra(pos, o, world), &scaler});
  };
  // Under DDP every rank must stop at the same step (Note [kiln-lenet with DDP]).
  auto stop_now = [&](bool at_check_point) {
    if (!dp.group) return should_stop(global_step);
    if (!at_check_point) return false;
    return distributed::any_rank_wants(should_stop(global_step), *dp.group);
  };

  // Stops the run at `pos` (its checkpoint, if any, already written).
  auto interrupted = [&](const std::string& where) {
    out << "interrupted " << where;
    if (!o.save.empty()) out << "; checkpoint saved to " << o.save << " (continue with --resume " << o.save << ")";
    out << "\n" << std::flush;
    result.status = RunStatus::Interrupted;
    result.history = pos.history;
    result.epoch = pos.epoch;
    result.step_in_epoch = pos.step_in_epoch;
    result.global_step = global_step;
    finish_data_parallel(dp);
    return result;
  };

  int64_t parameters = 0;
  for (const Tensor& p : model.parameters()) parameters += p.numel();
  out << "LeNet (" << parameters << " parameters) on " << data.description << ": " << data.train->size()
      << " training, " << data.test->size() << " test images\n"
      << recipe(o) << ", " << o.workers << " loader workers, " << get_num_threads() << " threads, device "
      << device.str() << (o.amp ? ", mixed precision " + std::string(dtype_name(amp_dtype)) : std::string());
  if (data_parallel) out << ", DataParallel over " << data_parallel->devices().size() << " replicas";
  if (dp.group) {
    out << ", " << dp.world_size << " processes (" << dp.group->backend_name() << "), global batch "
        << o.batch_size * dp.world_size;
  }
  out << "\n";

  model.train();
  for (; pos.epoch < o.epochs; ++pos.epoch) {
    data.train->set_epoch(static_cast<uint64_t>(pos.epoch));
    train_loader.begin_epoch(pos.epoch);
    for (int64_t skipped = 0; skipped < pos.step_in_epoch; ++skipped) {
      KILN_CHECK(train_loader.next().has_value(), "--resume '", o.resume, "': the checkpoint is at step ",
                 pos.step_in_epoch, " of an epoch that has only ", batches_per_epoch, " steps");
    }
    const std::string label = "epoch " + std::to_string(pos.epoch + 1) + "/" + std::to_string(o.epochs);
    ProgressLine progress(out, hooks.interactive, label, batches_per_epoch, pos.step_in_epoch);
    if (device.is_cuda()) progress.show_gpu(device.index);
    const Clock::time_point start = Clock::now();
    const double seconds_before = pos.seconds;
    int64_t images_this_run = 0;
    RunningLossSum loss_sum(pos.loss_sum);
    while (pos.step_in_epoch < batches_per_epoch) {
      // One optimizer step over `micro` batches (Note [kiln-lenet with DDP]).
      const int64_t micro = std::min(o.accum_steps, batches_per_epoch - pos.step_in_epoch);
      optimizer->zero_grad();
      for (int64_t m = 0; m < micro; ++m) {
        std::optional<data::Batch> batch = train_loader.next();
        KILN_CHECK(batch.has_value(), "kiln-lenet: the loader ended after ", pos.step_in_epoch, " of ",
                   batches_per_epoch, " batches");
        Tensor images = normalize_batch(batch->data.to(device));  // (B, 3, 32, 32) float32
        Tensor labels = batch->target.to(device);                  // (B) int64
        Tensor loss;
        {
          AutocastGuard autocast(device.type, amp_dtype, o.amp);
          loss = F::cross_entropy((*trained)(images), labels);
        }
        Tensor scaled = scaler.scale(micro > 1 ? loss / static_cast<double>(micro) : loss);
        if (ddp && m + 1 < micro) {
          auto no_sync = ddp->no_sync();
          scaled.backward();
        } else {
          scaled.backward();
        }
        ++pos.step_in_epoch;
        const int64_t batch_images = labels.size(0);
        loss_sum.add(loss, batch_images);
        pos.images += batch_images;
        images_this_run += batch_images;
      }
      scaler.step(*optimizer);
      scaler.update();
      if (scheduler) scheduler->step();
      ++global_step;
      pos.seconds = seconds_before + std::chrono::duration<double>(Clock::now() - start).count();
      progress.update(
          pos.step_in_epoch, [&] { return loss_sum.read() / static_cast<double>(pos.images); },
          images_this_run * dp.world_size);
      if (stop_now(global_step % kStopCheckSteps == 0)) {
        progress.finish();
        pos.loss_sum = loss_sum.read();
        sum_over_ranks(pos, dp);  // every rank stops here together
        if (!o.save.empty()) save();
        return interrupted("at epoch " + std::to_string(pos.epoch + 1) + ", step " +
                           std::to_string(pos.step_in_epoch) + "/" + std::to_string(batches_per_epoch));
      }
    }
    progress.finish();
    pos.loss_sum = loss_sum.read();  // the device finished the epoch's steps: their time is complete
    pos.seconds = seconds_before + std::chrono::duration<double>(Clock::now() - start).count();

    result.evaluation = run_evaluation();
    sum_over_ranks(pos, dp);
    const double elapsed = elapsed_before + std::chrono::duration<double>(Clock::now() - run_start).count();
    pos.history.push_back(epoch_record(pos, result.evaluation, optimizer->lr(0), elapsed));
    out << summary(pos.history.back(), o.epochs) << "\n" << std::flush;
    // The position after this epoch: the next one, from its first step, in
    // this run's order.
    pos = {.epoch = pos.epoch + 1, .history = std::move(pos.history), .order_replicas = dp.world_size};
    if (dp.is_main()) write_epoch_outputs(o, pos, save, err);
    --pos.epoch;
    // A Ctrl-C during the test pass stops here, where the checkpoint just
    // written already holds the position.
    if (pos.epoch + 1 < o.epochs && stop_now(true)) {
      ++pos.epoch;
      return interrupted("after epoch " + std::to_string(pos.epoch));
    }
  }

  // A run resumed from its final checkpoint trains no epoch: evaluate here.
  if (pos.history.empty() || result.evaluation.images == 0) result.evaluation = run_evaluation();
  out << "\ntest accuracy per class after " << o.epochs << (o.epochs == 1 ? " epoch:\n" : " epochs:\n")
      << format_class_table(result.evaluation, data.class_names) << std::flush;
  result.status = RunStatus::Finished;
  result.history = pos.history;
  result.epoch = o.epochs;
  result.global_step = global_step;
  finish_data_parallel(dp);
  return result;
}

}  // namespace kiln::apps::lenet
