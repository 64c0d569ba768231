// The training run of kiln-dcgan as a library call, so that tests (and
// other programs) drive it in-process:
//
//   TrainOptions o;
//   o.data = "data"; o.steps = 500; o.samples = "grid.png";
//   TrainingResult r = run_training(o);
//   // r.history: one StepRecord per step; r.generator, r.discriminator: the trained networks
//
// Note [DCGAN step]
// One step trains the discriminator D, then the generator G, on one batch
// of real images x scaled to [-1, 1] and a batch of latents z ~ N(0, 1):
//   D: minimise BCE(D(x), 1) + BCE(D(G(z)), 0), with G(z) detached, so
//      that D's gradients stop at its input;
//   G: minimise BCE(D(G(z)), 1), the same G(z), through the D just updated
//      (the paper's non-saturating loss: log D(G(z)) up rather than
//      log(1 - D(G(z))) down, which gives G no gradient while D wins).
// D sees the real and the fake batch in two forwards, so that its batch
// norms never mix the two. D(x) and D(G(z)) in the log are the mean
// sigmoids of D's logits: on the real batch and the fake one during D's
// update (d_g_z1), and on the fake one during G's (d_g_z2). A D that wins
// drives d_x to 1 and d_g_z to 0; a balanced game keeps them apart but
// short of those.
//
// Note [DCGAN randomness]
// Everything random is a function of --seed: the initial weights draw from
// the random generator kiln::Generator(seed) (dcgan_init_), the latents of
// the steps from their own kiln::Generator(seed + 1), whose position the
// checkpoint keeps, the fixed latents of the sample grid from
// kiln::Generator(seed + 2), and epoch e's data order is the loader's
// shuffle of (seed, e). So a run resumed from its
// checkpoint ends, on the CPU, with the same parameters bit for bit as one
// that never stopped, and the grid compares across steps and runs.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "apps/dcgan/models.h"
#include "apps/dcgan/options.h"
#include "nn/container.h"

namespace kiln::apps::dcgan {

// One step's numbers (Note [DCGAN step]).
struct StepRecord {
  int64_t step = 0;   // 1-based, over the whole run
  int64_t epoch = 0;  // 1-based
  double loss_d = 0;  // BCE(D(x), 1) + BCE(D(G(z)), 0)
  double loss_g = 0;  // BCE(D(G(z)), 1)
  double d_x = 0;
  double d_g_z1 = 0;
  double d_g_z2 = 0;
};

// {"step":12,"epoch":1,"loss_d":1.2,"loss_g":2.3,"d_x":0.6,"d_g_z1":0.3,"d_g_z2":0.2}
std::string to_json_line(const StepRecord& record);

struct TrainerHooks {
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;  // warnings: more threads than cores
  // Asked after every step, with the steps done in the whole run; true
  // stops the run there: the grid and, with --save, the checkpoint are
  // written and the run returns Interrupted. Empty: interrupt_requested().
  std::function<bool(int64_t step)> should_stop = {};
};

enum class RunStatus { Finished, Interrupted };

struct TrainingResult {
  RunStatus status = RunStatus::Finished;
  std::vector<StepRecord> history;  // the steps this call took (not those before a --resume)
  int64_t steps = 0;                // steps of the whole run, resumed ones included
  DCGANGenerator generator = nullptr;
  std::shared_ptr<nn::Sequential> discriminator;
  std::string data_description;  // "image folder (...)", "CIFAR-10 binary (...)"
};

// Trains as the options say, printing a progress line every print_every
// steps to hooks.out, and writes the sample grid (sample_grid) to
// options.samples. Throws kiln::Error for invalid options, a missing or
// unreadable data set (naming --data or KILN_DATA), a checkpoint that does
// not fit (naming --resume and what differs), outputs that cannot be
// written (naming the flag).
TrainingResult run_training(const TrainOptions& options, const TrainerHooks& hooks = {});

// The 64 latents of the sample grid: (64, nz, 1, 1) float32 on the CPU,
// from kiln::Generator(seed + 2) (Note [DCGAN randomness]).
Tensor grid_latents(const TrainOptions& options);

// G(latents) as an 8-column uint8 grid (3, H, W) of the images mapped from
// [-1, 1] (data::make_image_grid). G runs in training mode, its batch norms
// normalising with the statistics of these latents, as it trains and as
// PyTorch's DCGAN example draws its grid: the running statistics of eval
// mode lag behind a generator that changes every step (ten steps in, they
// still give a uniformly grey grid). The running statistics are restored
// afterwards, so drawing a grid changes nothing in G.
Tensor sample_grid(DCGANGeneratorImpl& generator, const Tensor& latents);

}  // namespace kiln::apps::dcgan
