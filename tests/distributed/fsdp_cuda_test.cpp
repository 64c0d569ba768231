// FSDP on a GPU over NCCL, one rank (what a machine with one GPU can run):
// with cpu_offload the shards, their gradients and the optimizer state live
// in host memory and each unit is gathered onto the GPU to compute; the
// training must match the same model trained on the GPU without FSDP.
// Without a GPU, or in a build without NCCL, the tests skip and say why.
#include <gtest/gtest.h>

#ifdef KILN_WITH_NCCL

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "multi_process.h"
#include "nn/models/gpt.h"
#include "optim/adam.h"
#include "tensor/cuda/device.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace kiln::distributed::testing {
namespace {

using fsdp::FSDPOptions;
using fsdp::FullyShardedDataParallel;

#define SKIP_WITHOUT_GPU()       \
  if (cuda::device_count() == 0) \
  GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0): FSDP over nccl needs a GPU"

nn::GPTConfig small_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

std::pair<Tensor, Tensor> batch(int step) {
  Generator gen;
  gen.manual_seed(70 + static_cast<uint64_t>(step));
  Tensor tokens = randint(0, 64, {4, 17}, DType::Int64, &gen);
  return {tokens.narrow(1, 0, 16).contiguous().to(cuda_device(0)),
          tokens.narrow(1, 1, 16).contiguous().to(cuda_device(0))};
}

optim::AdamWOptions adamw() {
  optim::AdamWOptions o(1e-3);
  return o;
}

void expect_matches_plain_gpu_training(bool cpu_offload) {
  run_on_ranks(1, [cpu_offload](int) {
    auto group = make_test_group("nccl", std::chrono::seconds(60));
    const int steps = 5;
    manual_seed(5);
    auto model = std::make_shared<nn::GPT>(small_gpt());
    // With offload the model stays in host memory and FSDP computes on the GPU.
    if (!cpu_offload) model->to(cuda_device(0));
    optim::AdamW opt(model->parameters(), adamw());
    FSDPOptions options;
    options.group = group;
    options.wrap_policy = fsdp::wrap_by_class<nn::gpt::Block>();
    options.cpu_offload = cpu_offload;
    options.compute_device = cuda_device(0);
    auto sharded = std::make_shared<FullyShardedDataParallel>(model, options);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s);
      opt.zero_grad();
      Tensor logits = sharded->forward(x);
      EXPECT_TRUE(logits.device().is_cuda());
      nn::GPT::loss_from_logits(logits, y).backward();
      opt.step();
      const Device home = cpu_offload ? kCPU : cuda_device(0);
      for (const Tensor& p : model->parameters()) {
        EXPECT_EQ(p.device(), home);
        EXPECT_EQ(p.grad().device(), home);
        EXPECT_EQ(opt.state(p).at("exp_avg").device(), home);
      }
    }
    std::vector<Tensor> mine;
    sharded->with_full_parameters([&] {
      for (const Tensor& p : model->parameters()) mine.push_back(p.detach().to(kCPU).to(DType::Float64));
    });

    manual_seed(5);
    auto reference = std::make_shared<nn::GPT>(small_gpt());
    reference->to(cuda_device(0));
    optim::AdamW ref_opt(reference->parameters(), adamw());
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s);
      ref_opt.zero_grad();
      nn::GPT::loss_from_logits(reference->forward(x), y).backward();
      ref_opt.step();
    }
    double worst = 0;
    auto ref = reference->parameters();
    for (size_t i = 0; i < mine.size(); ++i) {
      Tensor d = ops::abs(ops::sub(mine[i], ref[i].to(kCPU).to(DType::Float64)));
      worst = std::max(worst, ops::max(d).item<double>());
    }
    std::printf("FSDP on nccl, cpu_offload=%d: max |FSDP - plain GPU training| after %d AdamW steps: %.3g\n",
                static_cast<int>(cpu_offload), steps, worst);
    // The same float32 arithmetic, but Adam runs on the host under offload.
    EXPECT_LE(worst, 1e-5);
  });
}

TEST(FSDPCuda, OneRankOnNcclWithCpuOffloadTrainsAsPlainGpuTraining) {
  SKIP_WITHOUT_GPU();
  expect_matches_plain_gpu_training(true);
}

TEST(FSDPCuda, OneRankOnNcclWithoutOffloadTrainsAsPlainGpuTraining) {
  SKIP_WITHOUT_GPU();
  expect_matches_plain_gpu_training(false);
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_NCCL
