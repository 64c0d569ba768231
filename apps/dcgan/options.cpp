// kiln-dcgan's flags, through CLI11. Range checks live in validate() rather
// than in CLI11 validators so that the library API (run_training) applies
// the same checks to options built in code.
#include "apps/dcgan/options.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "apps/common/cli.h"
#include "apps/common/run_setup.h"
#include "tensor/error.h"

namespace kiln::apps::dcgan {

namespace fs = std::filesystem;

namespace {

// No run comes near it; above it epochs x steps could overflow int64.
constexpr int64_t kMaxEpochs = 1'000'000'000;

// What scripts/get-cifar10.sh looks for inside a folder, in its order.
bool holds_cifar_batches(const fs::path& folder) {
  std::error_code error;
  return fs::is_regular_file(folder / "data_batch_1.bin", error) && fs::is_regular_file(folder / "test_batch.bin", error);
}
bool holds_image_tree(const fs::path& folder) {
  std::error_code error;
  return fs::is_directory(folder / "train", error) && fs::is_directory(folder / "test", error);
}

}  // namespace

void validate(const TrainOptions& o) {
  KILN_CHECK(o.epochs >= 1 && o.epochs <= kMaxEpochs, "--epochs must be from 1 to ", kMaxEpochs, ", got ", o.epochs);
  KILN_CHECK(o.steps >= 0, "--steps must be non-negative (0: no cap), got ", o.steps);
  KILN_CHECK(o.batch_size >= 2, "--batch-size must be at least 2 (batch norm needs two images), got ", o.batch_size);
  KILN_CHECK(o.size.nz >= 1, "--nz must be at least 1, got ", o.size.nz);
  KILN_CHECK(o.size.ngf >= 1, "--ngf must be at least 1, got ", o.size.ngf);
  KILN_CHECK(o.size.ndf >= 1, "--ndf must be at least 1, got ", o.size.ndf);
  KILN_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be positive and finite, got ", o.lr);
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1), got ", o.beta1);
  KILN_CHECK(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1), got ", o.beta2);
  KILN_CHECK(o.threads >= 0, "--threads must be non-negative (0: all cores), got ", o.threads);
  check_device_flag(o.device);
  KILN_CHECK(fs::path(o.samples).extension() == ".png", "--samples must name a .png file, got '", o.samples, "'");
  KILN_CHECK(o.sample_every >= 0, "--sample-every must be non-negative (0: only at the end), got ", o.sample_every);
  KILN_CHECK(o.print_every >= 1, "--print-every must be at least 1, got ", o.print_every);
  KILN_CHECK(o.checkpoint_every >= 1, "--checkpoint-every must be at least 1, got ", o.checkpoint_every);
}

std::string resolve_data_path(const TrainOptions& o) {
  std::string given = o.data, source = "--data";
  if (given.empty()) {
    const char* env = std::getenv("KILN_DATA");
    if (env != nullptr && *env != '\0') {
      given = env;
      source = "KILN_DATA";
    } else {
      given = "data";
    }
  }
  std::error_code error;
  const fs::path p(given);
  KILN_CHECK(fs::exists(p, error), source, " '", given, "' does not exist (expected CIFAR-10: a folder holding ",
             "cifar-10-batches-bin/, cifar-10-binary.tar.gz, cifar10-jpeg/ or cifar10-jpeg.tar.gz, or one of them; ",
             "scripts/get-cifar10.sh fetches it)");
  if (!fs::is_directory(p, error) || holds_cifar_batches(p) || holds_image_tree(p)) return given;
  if (holds_cifar_batches(p / "cifar-10-batches-bin")) return (p / "cifar-10-batches-bin").string();
  if (fs::is_regular_file(p / "cifar-10-binary.tar.gz", error)) return (p / "cifar-10-binary.tar.gz").string();
  if (holds_image_tree(p / "cifar10-jpeg")) return (p / "cifar10-jpeg").string();
  if (fs::is_regular_file(p / "cifar10-jpeg.tar.gz", error)) return (p / "cifar10-jpeg.tar.gz").string();
  return given;  // open_datasets says what it looked for
}

namespace {

void add_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--data", o.data,
                 "CIFAR-10: a folder holding cifar-10-batches-bin/, cifar-10-binary.tar.gz, cifar10-jpeg/ or "
                 "cifar10-jpeg.tar.gz, or one of them (default: $KILN_DATA, else data/)");
  add_integer(app, "--epochs", o.epochs, "passes over the training set");
  add_integer(app, "--steps", o.steps, "stop after this many steps of the whole run (0: no cap)");
  add_integer(app, "--batch-size", o.batch_size, "images per step (the last short batch of an epoch is dropped)");
  add_integer(app, "--nz", o.size.nz, "latent channels of the generator's input");
  add_integer(app, "--ngf", o.size.ngf, "generator width: feature maps of its last hidden layer");
  add_integer(app, "--ndf", o.size.ndf, "discriminator width: feature maps of its first layer");
  app.add_option("--lr", o.lr, "Adam's learning rate, both networks")->capture_default_str();
  app.add_option("--beta1", o.beta1, "Adam's beta1, both networks")->capture_default_str();
  app.add_option("--beta2", o.beta2, "Adam's beta2, both networks")->capture_default_str();
  add_integer(app, "--seed", o.seed, "seeds the initial weights, the data order, the latents and the sample grid");
  add_integer(app, "--threads", o.threads, "threads of the CPU kernels (0: all cores)");
  app.add_option("--device", o.device, "cpu or cuda (cuda:N)")->capture_default_str();
  app.add_option("--samples", o.samples, "PNG of an 8x8 grid of samples from a fixed latent batch")
      ->capture_default_str();
  add_integer(app, "--sample-every", o.sample_every, "rewrite --samples every N steps too (0: only at the end)");
  add_integer(app, "--print-every", o.print_every, "steps between progress lines");
  app.add_option("--log", o.log,
                 "write one JSON object per step to FILE.jsonl: the losses of D and G, D(x) and D(G(z))");
  app.add_option("--save", o.save,
                 "write a checkpoint (both networks and optimizers, the data position and the latent stream) to "
                 "FILE at the end, every --checkpoint-every steps and on Ctrl-C (then exit with code 130)");
  add_integer(app, "--checkpoint-every", o.checkpoint_every, "steps between checkpoints with --save");
  app.add_option("--resume", o.resume,
                 "continue the run saved in checkpoint FILE (the same recipe; --epochs and --steps may grow)");
}

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
  TrainOptions o;
  CLI::App app{
      "Trains a DCGAN on CIFAR-10 and writes a grid of its samples as a PNG. With no flags it runs the "
      "paper's recipe: 25 epochs, batch 64, Adam at lr 2e-4 with beta1 0.5."};
  app.get_formatter()->column_width(30);
  add_flags(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, app.exit(e)};
  }
  validate(o);
  return {o, 0};
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

}  // namespace kiln::apps::dcgan
