// The command line of kiln-dcgan: every setting of a run in one struct, the
// recipe in one place (TrainOptions' initialisers).
//
//   CommandLine cl = parse_command_line(argc, argv);
//   if (!cl.options) return cl.exit_code;   // --help, or a CLI11 parse error (printed)
//   TrainingResult r = run_training(*cl.options);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/dcgan/models.h"

namespace kiln::apps::dcgan {

// The recipe of the DCGAN paper, as PyTorch's DCGAN example runs it:
// batches of 64 images scaled to [-1, 1], Adam at lr 2e-4 with beta1 0.5
// for both networks, 25 epochs. docs/TRAINING.md states what a short run
// on two CPU cores gives.
struct TrainOptions {
  // CIFAR-10 (apps/lenet/data_source.h: a binary release or an image
  // folder, as a folder or an archive); empty: $KILN_DATA, else data/
  // (resolve_data_path).
  std::string data;
  int64_t epochs = 25;
  int64_t steps = 0;  // a cap on the optimizer steps of the whole run (0: none)
  int64_t batch_size = 64;
  ModelSize size;
  double lr = 2e-4;
  double beta1 = 0.5;
  double beta2 = 0.999;
  uint64_t seed = 1;
  int threads = 0;  // CPU kernel threads; 0: all cores
  std::string device = "cpu";
  // The grid of 64 samples from a fixed latent batch (8 x 8 images), written
  // at the end and every sample_every steps (0: only at the end).
  std::string samples = "dcgan_samples.png";
  int64_t sample_every = 0;
  int64_t print_every = 50;  // steps between progress lines
  std::string log;     // one JSON object per step (--resume appends)
  std::string save;    // checkpoint: both networks and optimizers, at the end, every checkpoint_every steps and on Ctrl-C
  int64_t checkpoint_every = 500;
  std::string resume;  // a --save checkpoint to continue, with the same recipe
};

// Throws kiln::Error naming the flag for a value out of range: epochs,
// batch size (at least 2: batch norm needs two images), widths or
// print/sample/checkpoint intervals below 1, a negative step cap or thread
// count, an lr that is not positive and finite, betas outside [0, 1), an
// empty --samples, a --samples that is not a .png, an unknown device.
void validate(const TrainOptions& options);

// Where the images come from: --data if given, else $KILN_DATA, else
// "data"; a folder is searched as scripts/get-cifar10.sh searches it
// (cifar-10-batches-bin/, cifar-10-binary.tar.gz, cifar10-jpeg/,
// cifar10-jpeg.tar.gz, or the folder itself). Throws kiln::Error naming
// the flag or the variable when the path does not exist.
std::string resolve_data_path(const TrainOptions& options);

// The result of parsing: options to run with, or none and the exit code
// (0 after --help; CLI11's code after a parse error, already printed).
struct CommandLine {
  std::optional<TrainOptions> options;
  int exit_code = 0;
};

// Parses and validates argv (argv[0] is the program). Validation errors and
// malformed or out-of-range integers throw kiln::Error naming the flag;
// CLI11's own errors (unknown flag, missing value, a float that is not a
// number) are printed to stderr and returned as an exit code.
CommandLine parse_command_line(int argc, const char* const* argv);
CommandLine parse_command_line(const std::vector<std::string>& args);

}  // namespace kiln::apps::dcgan
