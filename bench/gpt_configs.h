// The GPT configs the GPT benchmarks share (bench/gpt.cpp, bench/fsdp.cpp;
// bench/gpt_torch.py and bench/fsdp_torch.py build the same): nn::GPT with
// bias off, dropout 0 and a tied LM head over a vocabulary of kVocab,
//   small: 4 layers, 4 heads, width 128, block 128, global batch 32;
//   baby:  nanoGPT's Shakespeare-char, 6, 6, 384, 256, global batch 64.
#pragma once

#include <cstdint>
#include <string>

#include "nn/models/gpt.h"
#include "tensor/error.h"

namespace kiln::bench {

inline constexpr int64_t kVocab = 65;

struct GPTBenchConfig {
  nn::GPTConfig model;
  int64_t batch;  // global
};

// The config called `name`; throws naming `program` for another name.
inline GPTBenchConfig gpt_config_named(const std::string& name, const std::string& program) {
  nn::GPTConfig model{.vocab_size = kVocab, .dropout = 0.0, .bias = false};
  if (name == "small") {
    model.n_layer = 4, model.n_head = 4, model.n_embd = 128, model.block_size = 128;
    return {model, 32};
  }
  KILN_CHECK(name == "baby", program, ": --config must be small or baby, got '", name, "'");
  model.n_layer = 6, model.n_head = 6, model.n_embd = 384, model.block_size = 256;
  return {model, 64};
}

}  // namespace kiln::bench
