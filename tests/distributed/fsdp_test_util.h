// Shared by the FSDP tests (fsdp_test.cpp, fsdp_state_dict_test.cpp): a
// tiny float64 GPT, its batches of token windows, a batch's rows for one
// rank, and an FSDP model's parameters gathered.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "nn/models/gpt.h"
#include "tensor/factory.h"
#include "tensor/random.h"

namespace kiln::distributed::testing {

// Three blocks of width 16 over 29 tokens: small enough for 100 steps on 4
// ranks in a few seconds, with units of equal size (Note [FSDP unit padding]).
inline nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 29;
  c.block_size = 8;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

inline std::shared_ptr<nn::GPT> make_gpt(uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::GPT>(tiny_gpt());
  model->to(DType::Float64);
  return model;
}

// Step `step`'s batch of `batch` windows of 8 tokens and their targets (the
// next tokens), the same in every process; `seed` keeps tests' batches apart.
inline std::pair<Tensor, Tensor> gpt_batch(int step, int64_t batch, uint64_t seed) {
  Generator gen;
  gen.manual_seed(seed + static_cast<uint64_t>(step));
  Tensor tokens = randint(0, 29, {batch, 9}, DType::Int64, &gen);
  return {tokens.narrow(1, 0, 8).contiguous(), tokens.narrow(1, 1, 8).contiguous()};
}

// Rows [rank * n / world, (rank + 1) * n / world) of `t`.
inline Tensor rows_of(const Tensor& t, int rank, int world) {
  const int64_t n = t.shape()[0];
  const int64_t begin = rank * n / world, end = (rank + 1) * n / world;
  return t.narrow(0, begin, end - begin);
}

// `model` under FULL_SHARD over `group`, every block a unit.
inline std::shared_ptr<fsdp::FullyShardedDataParallel> shard_by_block(std::shared_ptr<nn::GPT> model,
                                                                      std::shared_ptr<ProcessGroup> group) {
  fsdp::FSDPOptions options;
  options.group = std::move(group);
  options.wrap_policy = fsdp::wrap_by_class<nn::gpt::Block>();
  return std::make_shared<fsdp::FullyShardedDataParallel>(std::move(model), options);
}

// The wrapped module's parameters gathered (collective), as copies.
inline std::vector<Tensor> full_parameters(fsdp::FullyShardedDataParallel& wrapper) {
  std::vector<Tensor> out;
  wrapper.with_full_parameters(
      [&] {
        for (const Tensor& p : wrapper.module().parameters()) out.push_back(p.detach().clone());
      },
      /*writeback=*/false);
  return out;
}

}  // namespace kiln::distributed::testing
