// Shared by the ZeroRedundancyOptimizer tests (zero_test.cpp,
// zero_state_dict_test.cpp): the two models, their seeded batches, training
// loops in one process and under ZeRO, and how to compare the results.
#pragma once

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/zero/zero_redundancy_optimizer.h"
#include "multi_process.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/parallel.h"
#include "tensor/random.h"
#include "training_test_util.h"

namespace kiln::distributed::testing {

inline constexpr std::chrono::milliseconds kZeroTimeout(30000);
inline constexpr int64_t kBatch = 12;  // divisible by 2, 3 and 4 ranks

// This rank's gloo group; the rank computes on one thread, as up to 4 ranks
// share CI's 2 cores (OpenMP threads spinning against each other's
// processes would make the test several times slower).
inline std::shared_ptr<ProcessGroup> rank_group() {
  set_num_threads(1);
  return make_test_group("gloo", kZeroTimeout);
}

// Rows [rank * n / world, (rank + 1) * n / world) of `t`.
inline Tensor shard(const Tensor& t, int rank, int world) {
  const int64_t n = t.shape()[0];
  const int64_t begin = rank * n / world, end = (rank + 1) * n / world;
  return t.narrow(0, begin, end - begin);
}

inline RankOptions slow_ranks() {
  RankOptions options;
  options.deadline = std::chrono::seconds(300);
  return options;
}

// The two models the issue names: float64 LeNet (62k parameters, one of
// them 78% of the model) and a wide MLP of evenly sized layers.
enum class Model { LeNet, WideMlp };
inline const char* model_name(Model m) { return m == Model::LeNet ? "LeNet" : "wide MLP"; }

inline std::shared_ptr<nn::Module> make_model(Model m, uint64_t seed) {
  if (m == Model::LeNet) return make_lenet(seed);
  manual_seed(seed);
  auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 256), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(256, 10));
  mlp->to(DType::Float64);
  return mlp;
}

// Step `step`'s whole batch, the same in every process.
inline std::pair<Tensor, Tensor> batch(Model m, int step) {
  if (m == Model::LeNet) return batch_for(step, kBatch);
  Generator gen;
  gen.manual_seed(2000 + static_cast<uint64_t>(step));
  Tensor x = randn({kBatch, 16}, DType::Float64, &gen);
  Tensor y = randint(0, 10, {kBatch}, DType::Int64, &gen);
  return {x, y};
}

inline optim::AdamOptions adam() {
  optim::AdamOptions o(1e-3);
  return o;
}

inline optim::SGDOptions sgd_momentum() { return optim::SGDOptions(0.05).momentum(0.9); }

// What the loops below may do beside forward, backward and step.
struct Loop {
  int steps = 100;
  int micro_batches = 1;                 // gradient accumulation: the loss of each divided by their number
  double clip = 0.0;                     // clip the gradient norm to this, when positive
  std::vector<double>* norms = nullptr;  // the norms clipping saw, one per step
};

// One optimizer over every parameter, one process, the whole batch.
inline std::shared_ptr<nn::Module> train_single(Model m, const OptimizerFactory& make_optimizer, const Loop& loop) {
  auto model = make_model(m, 7);
  auto opt = make_optimizer({{model->parameters(), {}}});
  for (int s = 0; s < loop.steps; ++s) {
    auto [x, y] = batch(m, s);
    opt->zero_grad();
    for (int k = 0; k < loop.micro_batches; ++k) {
      (nn::functional::cross_entropy(model->forward(shard(x, k, loop.micro_batches)), shard(y, k, loop.micro_batches)) /
       loop.micro_batches)
          .backward();
    }
    if (loop.clip > 0) loop.norms->push_back(optim::clip_grad_norm_(model->parameters(), loop.clip));
    opt->step();
  }
  return model;
}

// A file the test process and its rank processes all reach: named after
// the test process, which is the ranks' parent.
inline std::string test_process_file(const std::string& name) {
  const pid_t test_process = in_rank_process() ? getppid() : getpid();
  return "/tmp/kiln_zero_test_" + std::to_string(test_process) + "_" + name + ".safetensors";
}

// ZeRO at `stage` over `group`: stage 1 beside DDP, stage 2 alone. Each rank
// starts from other weights, and takes rank 0's.
struct ZeroRun {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<ZeroRedundancyOptimizer> opt;
};

inline ZeroRun make_zero(Model m, int stage, const OptimizerFactory& make_optimizer,
                         std::shared_ptr<ProcessGroup> group) {
  ZeroRun run;
  run.model = make_model(m, 7 + static_cast<uint64_t>(group->rank()));
  if (stage == 1) {
    DDPOptions ddp;
    ddp.group = group;
    run.ddp = std::make_shared<DistributedDataParallel>(run.model, ddp);
  }
  ZeroOptions options;
  options.group = group;
  options.stage = stage;
  options.bucket_cap_bytes = 256 << 10;  // a few buckets per rank
  run.opt = std::make_unique<ZeroRedundancyOptimizer>(run.model->parameters(), make_optimizer, options);
  return run;
}

inline void train_zero(Model m, ZeroRun& run, const Loop& loop, int from_step = 0) {
  const int rank = run.opt->group().rank(), world = run.opt->group().size();
  nn::Module& net = run.ddp ? static_cast<nn::Module&>(*run.ddp) : *run.model;
  for (int s = from_step; s < from_step + loop.steps; ++s) {
    auto [x, y] = batch(m, s);
    Tensor xr = shard(x, rank, world), yr = shard(y, rank, world);
    run.opt->zero_grad();
    for (int k = 0; k < loop.micro_batches; ++k) {
      (nn::functional::cross_entropy(net.forward(shard(xr, k, loop.micro_batches)), shard(yr, k, loop.micro_batches)) /
       loop.micro_batches)
          .backward();
    }
    if (loop.clip > 0) loop.norms->push_back(run.opt->clip_grad_norm_(loop.clip));
    run.opt->step();
  }
}

// max |a - b| over every parameter, relative to max |b|.
inline double relative_difference(const nn::Module& a, const nn::Module& b) {
  double largest = 0;
  for (const Tensor& p : b.parameters()) largest = std::max(largest, max(abs(p)).item<double>());
  return max_difference(a, b) / largest;
}

// Elements of per-element optimizer state (tensors of more than one
// element, or of the parameter's shape) this rank's optimizer holds.
inline int64_t state_elements(const ZeroRedundancyOptimizer& zero) {
  const optim::Optimizer& local = zero.local_optimizer();
  int64_t n = 0;
  for (size_t g = 0; g < local.num_param_groups(); ++g) {
    for (const Tensor& p : local.params(g)) {
      for (const auto& [name, t] : local.state(p)) {
        if (t.shape() == p.shape()) n += t.numel();
      }
    }
  }
  return n;
}

}  // namespace kiln::distributed::testing
