// run_training: kiln-dcgan's step (Note [DCGAN step]), its loop over the
// epochs, its checkpoints and its sample grids.
#include "apps/dcgan/trainer.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <utility>

#include "apps/common/checkpoint_fields.h"
#include "apps/common/interrupt.h"
#include "apps/common/jsonl.h"
#include "apps/common/progress.h"
#include "apps/common/run_setup.h"
#include "apps/lenet/data_source.h"
#include "data/dataloader.h"
#include "data/image_write.h"
#include "kiln.h"

namespace kiln::apps::dcgan {

namespace F = nn::functional;

namespace {

constexpr const char* kFormat = "kiln-dcgan-checkpoint-1";
constexpr int64_t kGridImages = 64;

// The settings a checkpoint must share with the run that resumes it: those
// that shape the trajectory. --epochs and --steps only say where it stops.
std::string recipe(const TrainOptions& o) {
  return "nz " + std::to_string(o.size.nz) + ", ngf " + std::to_string(o.size.ngf) + ", ndf " +
         std::to_string(o.size.ndf) + ", batch size " + std::to_string(o.batch_size) + ", adam lr " + exact_text(o.lr) +
         " betas " + exact_text(o.beta1) + " " + exact_text(o.beta2) + ", seed " + std::to_string(o.seed);
}

// Everything a run holds, set up by the helpers below and used by
// run_training's loop.
struct Run {
  Run(const TrainOptions& options, const TrainerHooks& hooks);

  const TrainOptions& o;
  std::ostream* out;
  std::function<bool(int64_t)> should_stop;
  Device device;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  lenet::Datasets data;
  std::unique_ptr<data::DataLoader> loader;
  DCGANGenerator g = nullptr;
  std::shared_ptr<nn::Sequential> d;
  std::unique_ptr<optim::Adam> g_optimizer, d_optimizer;
  kiln::Generator noise{0};  // the steps' latents (Note [DCGAN randomness])
  Tensor grid_z;             // (64, nz, 1, 1) on the device

  int64_t epoch = 0;  // the epoch in progress, 0-based
  int64_t step = 0;   // steps done in the whole run
  TrainingResult result;
};

Run::Run(const TrainOptions& options, const TrainerHooks& hooks)
    : o((validate(options), options)),
      out(hooks.out),
      should_stop(hooks.should_stop ? hooks.should_stop : [](int64_t) { return interrupt_requested(); }),
      device(o.device) {
  check_outputs({{"--samples", o.samples}, {"--log", o.log}, {"--save", o.save}});
  if (o.threads > 0) set_num_threads(o.threads);
  warn_if_oversubscribed(*hooks.err, "kiln-dcgan");
}

// The training images in a shuffled order per epoch, dropping the short
// last batch: batch norm over a batch of one image would divide by zero.
void open_data(Run& run) {
  const TrainOptions& o = run.o;
  run.data = lenet::open_datasets(resolve_data_path(o), /*augment=*/false, o.seed);
  KILN_CHECK(run.data.train->size() >= o.batch_size, "--batch-size ", o.batch_size, " is larger than the ",
             run.data.train->size(), " training images of ", run.data.description);
  data::DataLoaderOptions options;
  options.batch_size = o.batch_size;
  options.shuffle = true;
  options.drop_last = true;
  options.seed = o.seed;
  options.pin_memory = run.device.is_cuda();
  run.loader = std::make_unique<data::DataLoader>(run.data.train, options);
}

// Both networks from the seed (Note [DCGAN randomness]), on the device, and
// their optimizers.
void build_networks(Run& run) {
  const TrainOptions& o = run.o;
  manual_seed(o.seed);  // the layers' own initialisation, which dcgan_init_ replaces
  run.g = DCGANGenerator(o.size);
  run.d = make_discriminator(o.size);
  kiln::Generator init(o.seed);
  dcgan_init_(*run.g, &init);
  dcgan_init_(*run.d, &init);
  run.g->to(run.device);
  run.d->to(run.device);
  const optim::AdamOptions adam = optim::AdamOptions(o.lr).betas({o.beta1, o.beta2});
  run.g_optimizer = std::make_unique<optim::Adam>(run.g->parameters(), adam);
  run.d_optimizer = std::make_unique<optim::Adam>(run.d->parameters(), adam);
  run.noise.manual_seed(o.seed + 1);
  run.grid_z = grid_latents(o).to(run.device);
}

void add_prefixed(TensorDict& into, const std::string& prefix, const TensorDict& from) {
  for (const auto& [name, t] : from) into.insert(prefix + name, t);
}

// The entries of `all` under `prefix`, without it.
TensorDict take_prefixed(const TensorDict& all, const std::string& prefix) {
  TensorDict out;
  for (const auto& [name, t] : all) {
    if (name.starts_with(prefix)) out.insert(name.substr(prefix.size()), t);
  }
  return out;
}

// One safetensors file: both networks and optimizers and the loader's
// position as tensors; the recipe, the epoch, the step and the latents'
// stream position as metadata.
void save_checkpoint(const Run& run) {
  TensorDict all;
  add_prefixed(all, "generator.", run.g->state_dict());
  add_prefixed(all, "discriminator.", run.d->state_dict());
  add_prefixed(all, "generator_optimizer.", run.g_optimizer->state_dict());
  add_prefixed(all, "discriminator_optimizer.", run.d_optimizer->state_dict());
  add_prefixed(all, "loader.", run.loader->state_dict());
  const std::map<std::string, std::string> meta = {{"format", kFormat},
                                                   {"recipe", recipe(run.o)},
                                                   {"epoch", std::to_string(run.epoch)},
                                                   {"step", std::to_string(run.step)},
                                                   {"noise_seed", std::to_string(run.noise.seed())},
                                                   {"noise_offset", std::to_string(run.noise.offset())}};
  SavingCheckpoint saving(run.o.save);
  save_safetensors(run.o.save, all, meta);
}

// Restores what save_checkpoint wrote. Every field is checked before any
// state changes; a state dict that does not fit names the file and the part.
void resume(Run& run) {
  const TrainOptions& o = run.o;
  std::map<std::string, std::string> meta;
  const TensorDict all = load_safetensors(o.resume, &meta);
  const CheckpointFields f(meta, o.resume, "kiln-dcgan");
  KILN_CHECK(f.text("format") == kFormat, "--resume '", o.resume, "' is not a kiln-dcgan checkpoint (format '",
             f.text("format"), "', expected '", kFormat, "')");
  f.check_recipe(recipe(o));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t epoch = f.integer("epoch", 0, o.epochs);
  const int64_t step = f.integer("step", 0, kMax);
  const int64_t noise_seed = f.integer("noise_seed", 0, kMax);
  const int64_t noise_offset = f.integer("noise_offset", 0, kMax);
  auto load = [&](const std::string& part, auto&& apply) {
    try {
      apply(take_prefixed(all, part + "."));
    } catch (const Error& e) {
      KILN_FAIL("--resume '", o.resume, "': the ", part, " does not fit: ", e.message());
    }
  };
  load("generator", [&](const TensorDict& s) { run.g->load_state_dict(s); });
  load("discriminator", [&](const TensorDict& s) { run.d->load_state_dict(s); });
  load("generator_optimizer", [&](const TensorDict& s) { run.g_optimizer->load_state_dict(s); });
  load("discriminator_optimizer", [&](const TensorDict& s) { run.d_optimizer->load_state_dict(s); });
  load("loader", [&](const TensorDict& s) { run.loader->load_state_dict(s); });
  run.noise.set_state(static_cast<uint64_t>(noise_seed), static_cast<uint64_t>(noise_offset));
  run.epoch = epoch;
  run.step = step;
}

double mean_probability(const Tensor& logits) { return mean(sigmoid(logits)).item<double>(); }

// Note [DCGAN step]. real: (N, 3, 32, 32) uint8 on the device.
StepRecord train_step(Run& run, const Tensor& real_images) {
  const int64_t n = real_images.size(0);
  const TensorOptions on_device{DType::Float32, run.device};
  Tensor real = real_images.to(DType::Float32) / 127.5 - 1.0;  // [0, 255] -> [-1, 1]
  Tensor z = randn({n, run.o.size.nz, 1, 1}, on_device, &run.noise);
  Tensor ones = kiln::ones({n}, on_device), zeros = kiln::zeros({n}, on_device);

  run.d_optimizer->zero_grad();
  Tensor real_logits = (*run.d)(real).view({n});
  Tensor fake = run.g(z);
  Tensor fake_logits = (*run.d)(fake.detach()).view({n});
  Tensor loss_d = F::binary_cross_entropy_with_logits(real_logits, ones) +
                  F::binary_cross_entropy_with_logits(fake_logits, zeros);
  loss_d.backward();
  run.d_optimizer->step();

  run.g_optimizer->zero_grad();
  Tensor fooled_logits = (*run.d)(fake).view({n});
  Tensor loss_g = F::binary_cross_entropy_with_logits(fooled_logits, ones);
  loss_g.backward();
  run.g_optimizer->step();

  NoGradGuard no_grad;
  return {.step = run.step + 1,
          .epoch = run.epoch + 1,
          .loss_d = loss_d.item<double>(),
          .loss_g = loss_g.item<double>(),
          .d_x = mean_probability(real_logits),
          .d_g_z1 = mean_probability(fake_logits),
          .d_g_z2 = mean_probability(fooled_logits)};
}

void print_progress(const Run& run, const StepRecord& r) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.start).count();
  const int64_t images = static_cast<int64_t>(run.result.history.size()) * run.o.batch_size;
  char line[256];
  std::snprintf(line, sizeof line,
                "epoch %lld/%lld  step %lld  loss D %.4f G %.4f  D(x) %.3f  D(G(z)) %.3f / %.3f  %.0f img/s  "
                "elapsed %s\n",
                static_cast<long long>(r.epoch), static_cast<long long>(run.o.epochs),
                static_cast<long long>(r.step), r.loss_d, r.loss_g, r.d_x, r.d_g_z1, r.d_g_z2,
                seconds > 0 ? static_cast<double>(images) / seconds : 0.0, format_duration(seconds).c_str());
  *run.out << line << std::flush;
}

void write_samples(Run& run) { data::write_png(run.o.samples, sample_grid(*run.g, run.grid_z)); }

int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

bool step_cap_reached(const Run& run) { return run.o.steps > 0 && run.step >= run.o.steps; }

}  // namespace

std::string to_json_line(const StepRecord& r) {
  char line[320];
  std::snprintf(line, sizeof line,
                R"({"step":%lld,"epoch":%lld,"loss_d":%.9g,"loss_g":%.9g,"d_x":%.9g,"d_g_z1":%.9g,"d_g_z2":%.9g})",
                static_cast<long long>(r.step), static_cast<long long>(r.epoch), r.loss_d, r.loss_g, r.d_x,
                r.d_g_z1, r.d_g_z2);
  return line;
}

Tensor grid_latents(const TrainOptions& o) {
  kiln::Generator gen(o.seed + 2);
  return randn({kGridImages, o.size.nz, 1, 1}, {}, &gen);
}

Tensor sample_grid(DCGANGeneratorImpl& generator, const Tensor& latents) {
  NoGradGuard no_grad;
  // The forward in training mode moves the running statistics; put them back.
  std::vector<std::pair<Tensor, Tensor>> buffers;  // (buffer, its value before)
  for (const Tensor& b : generator.buffers()) buffers.emplace_back(b, b.clone());
  const bool was_training = generator.is_training();
  generator.train();
  Tensor fake = generator(latents);  // (64, 3, 32, 32) in [-1, 1]
  generator.train(was_training);
  for (auto& [b, before] : buffers) b.copy_(before);
  return data::make_image_grid(fake, {.columns = 8, .range = {-1.0, 1.0}});
}

TrainingResult run_training(const TrainOptions& options, const TrainerHooks& hooks) {
  Run run(options, hooks);
  const TrainOptions& o = run.o;
  open_data(run);
  build_networks(run);
  if (!o.resume.empty()) resume(run);
  if (!o.log.empty() && o.resume.empty()) start_jsonl(o.log);
  *run.out << "kiln-dcgan: " << run.data.description << ", " << run.data.train->size() << " images, "
           << run.loader->size() << " steps per epoch; generator " << parameter_count(*run.g)
           << " parameters, discriminator " << parameter_count(*run.d) << "\n"
           << std::flush;

  bool stopped = false;
  while (run.epoch < o.epochs && !step_cap_reached(run) && !stopped) {
    run.loader->begin_epoch(run.epoch);
    while (!step_cap_reached(run)) {
      std::optional<data::Batch> batch = run.loader->next();
      if (!batch) break;
      const StepRecord record = train_step(run, batch->data.to(run.device));
      ++run.step;
      run.result.history.push_back(record);
      if (!o.log.empty()) append_jsonl(o.log, to_json_line(record));
      if (run.step % o.print_every == 0) print_progress(run, record);
      if (o.sample_every > 0 && run.step % o.sample_every == 0) write_samples(run);
      if (!o.save.empty() && run.step % o.checkpoint_every == 0) save_checkpoint(run);
      if (run.should_stop(run.step)) {
        stopped = true;
        break;
      }
    }
    if (!stopped && !step_cap_reached(run)) ++run.epoch;
  }
  if (!o.save.empty()) save_checkpoint(run);
  write_samples(run);
  *run.out << (stopped ? "stopped" : "finished") << " after step " << run.step << "; samples in " << o.samples
           << (o.save.empty() ? "" : ", checkpoint in " + o.save) << "\n"
           << std::flush;

  run.result.status = stopped ? RunStatus::Interrupted : RunStatus::Finished;
  run.result.steps = run.step;
  run.result.generator = run.g;
  run.result.discriminator = run.d;
  run.result.data_description = run.data.description;
  return run.result;
}

}  // namespace kiln::apps::dcgan
