// run_training: the epoch loop of kiln-lenet, its checkpoints (Note [Exact
// resume]) and its Ctrl-C handling.
#include "apps/lenet/trainer.h"

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <string>
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

void on_signal(int) { g_interrupted = 1; }

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

// The settings a checkpoint must share with the run that resumes it.
std::string recipe(const TrainerOptions& o) {
  return "epochs " + std::to_string(o.epochs) + ", batch size " + std::to_string(o.batch_size) + ", " +
         to_string(o.optimizer) + " lr " + exact(o.lr) + " momentum " + exact(o.momentum) + " weight decay " +
         exact(o.weight_decay) + ", schedule " + to_string(o.schedule) + ", augment " + (o.augment ? "on" : "off") +
         ", seed " + std::to_string(o.seed) + (o.amp ? ", amp" : "") +
         (o.accum_steps > 1 ? ", accum steps " + std::to_string(o.accum_steps) : "") +
         (o.ddp ? ", ddp " + o.backend : "") + (o.dp ? ", dp" : "");
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
  int64_t step_in_epoch = 0;  // its steps already done
  double loss_sum = 0;        // of those steps: sum of loss * batch size
  int64_t images = 0;
  double seconds = 0;
  std::vector<EpochRecord> history;
};

std::map<std::string, std::string> to_extra(const Position& p, const TrainerOptions& o) {
  return {{"recipe", recipe(o)},
          {"epoch", std::to_string(p.epoch)},
          {"step_in_epoch", std::to_string(p.step_in_epoch)},
          {"epoch_loss_sum", exact(p.loss_sum)},
          {"epoch_images", std::to_string(p.images)},
          {"epoch_seconds", exact(p.seconds)},
          {"history", history_to_json(p.history)}};
}

Position from_extra(const std::map<std::string, std::string>& extra, const TrainerOptions& o) {
  auto field = [&](const char* key) -> const std::string& {
    auto it = extra.find(key);
    KILN_CHECK(it != extra.end(), "--resume '", o.resume, "': not a kiln-lenet checkpoint (no '", key,
               "' entry in its metadata)");
    return it->second;
  };
  KILN_CHECK(field("recipe") == recipe(o), "--resume '", o.resume, "': the checkpoint was made with ",
             field("recipe"), "; this run has ", recipe(o), ". Resume with the flags of the saved run");
  Position p;
  p.epoch = std::stoll(field("epoch"));
  p.step_in_epoch = std::stoll(field("step_in_epoch"));
  p.loss_sum = std::stod(field("epoch_loss_sum"));
  p.images = std::stoll(field("epoch_images"));
  p.seconds = std::stod(field("epoch_seconds"));
  p.history = history_from_json(field("history"));
  return p;
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

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // One-shot: a second Ctrl-C while the checkpoint is written ends the
  // process; the atomic write leaves the previous checkpoint intact.
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool interrupt_requested() { return g_interrupted != 0; }

void reset_interrupt_request() { g_interrupted = 0; }

TrainingResult run_training(const TrainerOptions& o, const TrainerHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point run_start = Clock::now();
  validate(o);
  DataParallelRun dp = start_data_parallel(o);
  NullBuffer discard;
  std::ostream silent(&discard);
  std::ostream& out = dp.is_main() ? *hooks.out : silent;
  auto should_stop = hooks.should_stop ? hooks.should_stop : [](int64_t) { return interrupt_requested(); };
  if (o.threads > 0) set_num_threads(o.threads);
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

  data::DataLoaderOptions train_options;
  train_options.batch_size = o.batch_size;
  train_options.sampler = train_sampler(dp, data.train->size(), o.seed);
  train_options.shuffle = train_options.sampler == nullptr;
  train_options.num_workers = o.workers;
  train_options.seed = o.seed;
  train_options.pin_memory = device.is_cuda();
  data::DataLoader train_loader(data.train, train_options);
  // Batches per epoch; an optimizer step takes accum_steps of them.
  const int64_t batches_per_epoch = train_loader.size();
  const int64_t steps_per_epoch = (batches_per_epoch + o.accum_steps - 1) / o.accum_steps;
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(o, model.parameters());
  std::unique_ptr<optim::LRScheduler> scheduler = make_scheduler(o, *optimizer, o.epochs * steps_per_epoch);
  // --amp: bfloat16 has float32's exponent range and needs no loss scaling;
  // float16 does (Note [Dynamic loss scaling]). A disabled scaler passes
  // the loss and the step through unchanged.
  const DType amp_dtype = device.is_cuda() ? DType::Float16 : DType::BFloat16;
  optim::GradScaler scaler({.enabled = o.amp && device.is_cuda()});

  Position pos;
  int64_t global_step = 0;
  double elapsed_before = 0;  // the wall time of the run a resume continues
  if (!o.resume.empty()) {
    optim::LoadedCheckpoint loaded =
        optim::load_training_checkpoint(o.resume, {model, *optimizer, scheduler.get(), 0, {}, &scaler});
    pos = from_extra(loaded.extra, o);
    global_step = loaded.step;
    // The interrupted epoch's training time after the last finished epoch
    // is not in the history; its `seconds` resume the epoch's own clock.
    elapsed_before = (pos.history.empty() ? 0.0 : pos.history.back().elapsed_seconds) + pos.seconds;
    out << "resuming " << o.resume << " at epoch " << pos.epoch + 1 << ", step " << pos.step_in_epoch << "/"
        << batches_per_epoch << "\n";
  } else if (!o.log.empty() && dp.is_main()) {
    start_jsonl(o.log);
  }
  auto save = [&]() {
    if (!dp.is_main()) return;  // Note [kiln-lenet with DDP]
    optim::save_training_checkpoint(o.save,
                                    {model, *optimizer, scheduler.get(), global_step, to_extra(pos, o), &scaler});
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
        if (!o.save.empty()) save();
        return interrupted("at epoch " + std::to_string(pos.epoch + 1) + ", step " +
                           std::to_string(pos.step_in_epoch) + "/" + std::to_string(batches_per_epoch));
      }
    }
    progress.finish();
    pos.loss_sum = loss_sum.read();  // the device finished the epoch's steps: their time is complete
    pos.seconds = seconds_before + std::chrono::duration<double>(Clock::now() - start).count();

    result.evaluation = run_evaluation();
    // The epoch's training loss and images over every rank.
    std::vector<double> epoch_sums = {pos.loss_sum, static_cast<double>(pos.images)};
    if (dp.group) distributed::all_reduce_sum(epoch_sums, *dp.group);
    const double all_images = epoch_sums[1];
    EpochRecord record{.epoch = pos.epoch + 1,
                       .train_loss = all_images > 0 ? epoch_sums[0] / all_images : 0.0,
                       .test_loss = result.evaluation.loss,
                       .test_accuracy = result.evaluation.accuracy,
                       .lr = optimizer->lr(0),
                       .seconds = pos.seconds,
                       .images_per_second = pos.seconds > 0 ? all_images / pos.seconds : 0.0,
                       .elapsed_seconds = elapsed_before + std::chrono::duration<double>(Clock::now() - run_start).count()};
    pos.history.push_back(record);
    out << summary(record, o.epochs) << "\n" << std::flush;
    if (!o.log.empty() && dp.is_main()) append_jsonl(o.log, record);
    if (!o.plot.empty() && dp.is_main()) write_plot_svg(o.plot, pos.history);
    pos.step_in_epoch = 0;
    pos.loss_sum = 0;
    pos.images = 0;
    pos.seconds = 0;
    if (!o.save.empty()) {
      // The position after this epoch: the next one, from its first step.
      ++pos.epoch;
      save();
      --pos.epoch;
    }
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
