// Pipeline parallelism in one process: the classic Pipe(sequential, chunks)
// of torchgpipe and fairscale, and plain model parallelism.
//
//   namespace pp = kiln::distributed::pipeline;
//   pp::PipeOptions options;
//   options.devices = {Device::cuda(0), Device::cuda(1)};   // one per stage; empty: all on the CPU
//   options.schedule = "1f1b";
//   pp::Pipe pipe(model, /*chunks=*/8, loss_fn, options);   // model: a Sequential
//   optim::SGD opt(pipe.parameters(), {...});
//   Tensor loss = pipe.step({x}, y);                       // gradients in the model's parameters
//   opt.step();
//
// Note [Pipe: stages on threads]
// A Pipe cuts the Sequential into stages (options.balance, or by parameter
// count), moves stage i to options.devices[i], and runs each stage on a
// thread of its own, as torchgpipe runs one worker per device. The threads
// are the ranks of an in-process group: each holds a rank of a process group
// over a store in a private temporary folder (gloo when every stage is on the
// CPU, nccl when every stage is on its own GPU), and runs a Pipeline
// (pipeline.h) on it. So a Pipe runs exactly the schedules, checks and
// arithmetic of the multi-process pipeline: on a CPU-only machine the stages
// overlap on the one CPU device, on GPUs each stage's thread drives its
// device. The stage modules are the model's own: after step() the
// gradients are in the model's parameters, on their stages' devices.
//
// A Pipe therefore needs a process-group backend: gloo (a build with
// KILN_GLOO=ON; without it the constructor throws naming the backend), or
// nccl for stages on distinct GPUs.
//
// Errors. step() rethrows the error a stage thread raised first. A failing
// stage leaves its peers waiting for messages that will not come; they fail
// after options.timeout (their errors are consequences and are dropped), so
// step() throws within about that long.
//
// Plain model parallelism (no micro-batches, one thread) needs no Pipe:
// place_on_devices() returns the Sequential whose stages run on their
// devices, each receiving its input moved there (Tensor::to is
// differentiable, so backward carries the gradients back across devices).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/pipeline/pipeline.h"

namespace kiln::distributed::pipeline {

struct PipeOptions {
  // Modules per stage (split_sequential); empty: by parameter count
  // (balance_by_parameters) over devices.size() stages, or 2 when no devices are given.
  std::vector<int64_t> balance;
  // The device of each stage; empty: every stage on the CPU.
  std::vector<Device> devices;
  std::string schedule = "gpipe";  // make_schedule's names
  int stages_per_rank = 1;         // for "interleaved"
  bool checkpoint_activations = false;
  // How long a stage waits for another before failing (Note [Pipe: stages on threads]).
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

class Pipe {
 public:
  // `model`'s modules are moved to their stages' devices. `chunks`: the
  // number of micro-batches. Throws kiln::Error naming what is wrong.
  Pipe(std::shared_ptr<nn::Sequential> model, int chunks, LossFn loss, PipeOptions options = {});
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  // One forward and backward over the batch (Note [Pipeline runtime]):
  // inputs and target anywhere; they are moved to the first and last
  // stages' devices. Returns the batch's mean loss.
  Tensor step(const TensorList& inputs, const Tensor& target);
  // The forward pass only, under NoGradGuard: the batch's mean loss.
  Tensor evaluate(const TensorList& inputs, const Tensor& target);

  std::vector<Tensor> parameters() const { return model_->parameters(); }
  const Schedule& schedule() const { return schedule_; }
  // The modules of each stage (the model's own).
  const std::vector<std::shared_ptr<nn::Module>>& stages() const { return stages_; }

 private:
  struct Workers;  // the stage threads, pipe.cpp
  Tensor run(const TensorList& inputs, const Tensor& target, bool train);

  std::shared_ptr<nn::Sequential> model_;
  Schedule schedule_;
  std::vector<std::shared_ptr<nn::Module>> stages_;
  std::vector<Device> devices_;  // per stage
  std::unique_ptr<Workers> workers_;
};

// Model parallelism without a pipeline: the stages of `model`
// (split_sequential with `balance`) moved to `devices` (one per stage) and
// chained by a Sequential whose stage i first moves its floating-point
// inputs to devices[i]. Forward and backward run on the calling thread.
std::shared_ptr<nn::Sequential> place_on_devices(const nn::Sequential& model, const std::vector<int64_t>& balance,
                                                 const std::vector<Device>& devices);

}  // namespace kiln::distributed::pipeline
