// Training checkpoints: everything needed to resume a run exactly.
//
// One safetensors file (atomic write, validated load: tensor/safetensors.h)
// holds the model's state dict under "model.", the optimizer's under
// "optimizer.", the scheduler's under "scheduler." and the GradScaler's under
// "grad_scaler." (each when there is one), and in its metadata the step count
// and the default random generator's state, so dropout masks and random
// augmentation continue the same stream.
//
//   save_training_checkpoint("run.ckpt", {model, optimizer, &scheduler, step});
//   ...
//   int64_t step = load_training_checkpoint("run.ckpt", {model, optimizer, &scheduler}).step;
//
// Resuming from a checkpoint then gives bitwise the same trajectory on the
// CPU as a run that never stopped (tests/optim/training_checkpoint_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace kiln::optim {

struct TrainingState {
  nn::Module& model;
  Optimizer& optimizer;
  LRScheduler* scheduler = nullptr;  // optional
  int64_t step = 0;
  // Free-form strings saved with the checkpoint (epoch, data order seed...).
  std::map<std::string, std::string> extra = {};
  GradScaler* grad_scaler = nullptr;  // optional; a disabled one saves and loads nothing
};

void save_training_checkpoint(const std::string& path, const TrainingState& state);

// The same file from state dicts made elsewhere: a model trained under FSDP
// has its full state dicts gathered on one rank (distributed/fsdp/state_dict.h)
// while its module and optimizer hold only that rank's shards. `model` and
// `optimizer` are what Module::state_dict() and Optimizer::state_dict() of
// the unsharded model would give; `optimizer_name` what its name() gives.
// load_training_checkpoint reads the file into a plain module and optimizer.
struct TrainingStateDicts {
  const TensorDict& model;
  const TensorDict& optimizer;
  std::string optimizer_name;
  LRScheduler* scheduler = nullptr;  // optional
  int64_t step = 0;
  std::map<std::string, std::string> extra = {};
  GradScaler* grad_scaler = nullptr;  // optional
};
void save_training_checkpoint(const std::string& path, const TrainingStateDicts& state);

// Restores model, optimizer, scheduler and the default generator from
// `path`; returns the step and extra strings stored there. Throws naming the
// file on a missing or corrupt file, or one made for a different model,
// optimizer or scheduler (keys or shapes that do not match); then nothing
// has been changed.
struct LoadedCheckpoint {
  int64_t step = 0;
  std::map<std::string, std::string> extra;
};
LoadedCheckpoint load_training_checkpoint(const std::string& path, const TrainingState& state);

}  // namespace kiln::optim
