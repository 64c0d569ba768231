// GPT: a GPT-2-style decoder-only transformer, as nanoGPT's model.py
// (Karpathy), with the same module and parameter names so that state dicts
// interchange with it ("transformer.wte.weight", "transformer.wpe.weight",
// "transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.weight", ...,
// "transformer.ln_f.weight", "lm_head.weight"). scripts/gpt_torch.py holds
// the same model in PyTorch, and tests/optim/gpt_parity_test.cpp compares
// the two (logits, gradients, 100 AdamW steps, state dicts both ways).
//
//   GPT(config)                               idx (B, T) Int64, T <= block_size
//     tok = transformer.wte(idx)              (B, T, E)
//     pos = transformer.wpe(arange(T))        (T, E)
//     x = transformer.drop(tok + pos)
//     for block in transformer.h:             n_layer pre-LayerNorm blocks
//       x = x + block.attn(block.ln_1(x))     causal self-attention, n_head heads
//       x = x + block.mlp(block.ln_2(x))      Linear(E, 4E), exact GELU, Linear(4E, E)
//     logits = lm_head(transformer.ln_f(x))   (B, T, V); lm_head.weight IS wte.weight
//
//   auto gpt = std::make_shared<nn::GPT>(nn::GPTConfig{.vocab_size = 65, .block_size = 256,
//                                                      .n_layer = 6, .n_head = 6, .n_embd = 384});
//   Tensor loss = gpt->loss(x, y);            // x, y (B, T) Int64
//   optim::AdamW opt(optim::weight_decay_groups(gpt->parameters(), 0.1), optim::AdamWOptions(1e-3).beta2(0.95));
//   Tensor out = gpt->generate(prompt, 100, {.temperature = 0.8, .top_k = 200});
//
// Optimizer groups: nanoGPT's configure_optimizers decays the parameters of
// two or more dims (the Linear and embedding weights) and not the others
// (biases, LayerNorm weights); optim::weight_decay_groups(gpt->parameters(),
// weight_decay) is exactly that grouping (nn/ cannot depend on optim/, so
// GPT has no method for it). parameters() lists the tied weight once.
//
// Note [Tied embedding weights]
// The LM head's weight is the token embedding's weight: one tensor,
// registered twice (as Embedding's "weight" and as TiedLinear's "weight"),
// as nanoGPT's `self.transformer.wte.weight = self.lm_head.weight`. So:
// - parameters() and named_parameters() list it once, as
//   "transformer.wte.weight" (registration order), and an optimizer updates it once;
// - its gradient is the sum of both uses, accumulated into the one tensor;
// - state_dict() has both keys, "transformer.wte.weight" and
//   "lm_head.weight", sharing memory, exactly as torch's state_dict() of
//   nanoGPT; load_state_dict() requires both in strict mode, as torch's
//   does, and copies both into the one tensor (the last key wins where they
//   differ, which they do not in a dict saved from a tied model);
// - to(dtype) and to(device) keep the two names on one tensor (Note
//   [Module::to keeps parameter identity]).
// A checkpoint written by the safetensors library's save_model (which drops
// one name of a shared tensor) loads with strict = false.
//
// Note [KV cache and learned positions]
// Generating token t+1 needs the keys and values of every earlier token in
// every layer; they do not change when a token is appended (attention is
// causal), so generate() keeps them in a KVCache per layer and runs each
// new token alone: its query attends every cached key, so no mask is
// needed, and the step costs O(t) rather than a forward over t tokens. The
// prompt is run once, causally ("prefill"). The positions are learned
// absolute embeddings of at most block_size positions, so when the sequence
// outgrows block_size the window is cropped to its last block_size tokens,
// as nanoGPT's generate does, and every token in the window changes
// position: the cached keys and values, computed at the old positions, are
// wrong. The cache is then rebuilt by a prefill of the cropped window. Past
// block_size every new token costs such a prefill, exactly the work of the
// uncached path, and the tokens are the same as nanoGPT's (the tests compare
// greedy generation with and without the cache beyond block_size).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/container.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "tensor/random.h"

namespace kiln::nn {

// nanoGPT's GPTConfig, with its defaults (GPT-2 small, vocabulary padded to
// a multiple of 64).
struct GPTConfig {
  int64_t vocab_size = 50304;
  int64_t block_size = 1024;  // the longest sequence: the number of learned positions
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;  // must be a multiple of n_head
  double dropout = 0.0;  // in [0, 1): embeddings, attention weights, residual branches
  bool bias = true;      // biases in the Linear and LayerNorm layers

  // Throws naming the field and its value when a size is not positive,
  // n_embd is not a multiple of n_head, or dropout is outside [0, 1).
  void validate() const;
  // The number of parameters of a GPT of this config, the tied weight once.
  int64_t num_parameters() const;
};

namespace gpt {

// The keys and values one attention layer has computed for the tokens seen
// so far (Note [KV cache and learned positions]). The buffers are
// allocated for block_size tokens on first use; the first `length` are valid.
struct KVCache {
  Tensor keys;    // (B, H, block_size, D)
  Tensor values;  // (B, H, block_size, D)
  int64_t length = 0;
};

// Multi-head causal self-attention with the heads in one projection:
// c_attn Linear(E, 3E) gives q, k, v; c_proj Linear(E, E) mixes the heads.
class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);

  // x: (B, T, E) -> (B, T, E); token i attends tokens j <= i.
  Tensor forward(const Tensor& x) override;
  // The same for tokens that follow the cache's: appends their keys and
  // values to `cache` and attends the cached ones too. Either the cache is
  // empty (a causal prefill of T <= block_size tokens) or T is 1 (one new
  // token, which attends everything cached, unmasked). Runs under
  // NoGradGuard: the cache holds values, never a graph.
  Tensor forward_cached(const Tensor& x, KVCache& cache);

  const int64_t n_head;
  const int64_t n_embd;
  const int64_t block_size;
  const double dropout;
  std::shared_ptr<Linear> c_attn;
  std::shared_ptr<Linear> c_proj;
  std::shared_ptr<Dropout> resid_dropout;

 private:
  // (B, T, E) -> q, k, v each (B, H, T, D).
  std::vector<Tensor> heads(const Tensor& x);
  // y (B, H, T, D) -> resid_dropout(c_proj(y)) (B, T, E).
  Tensor merge_heads(const Tensor& y);
};

// Linear(E, 4E), exact GELU, Linear(4E, E), dropout.
class MLP : public Module {
 public:
  explicit MLP(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;  // (B, T, E) -> (B, T, E)

  std::shared_ptr<Linear> c_fc;
  std::shared_ptr<Linear> c_proj;
  std::shared_ptr<Dropout> dropout;
};

// A pre-LayerNorm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
class Block : public Module {
 public:
  explicit Block(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;           // (B, T, E) -> (B, T, E)
  Tensor forward_cached(const Tensor& x, KVCache& cache);  // as CausalSelfAttention::forward_cached

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

// y = x @ weight^T with a weight that another module owns (Note [Tied
// embedding weights]): the tensor is registered here as "weight" itself,
// not copied. weight: (out_features, in_features), a leaf.
class TiedLinear : public Module {
 public:
  explicit TiedLinear(Tensor weight);
  Tensor forward(const Tensor& x) override;  // (*, in) -> (*, out)
  // "in_features=32, out_features=65, bias=False"
  std::string extra_repr() const override;

  Tensor weight;
};

// GPT's input check for an op named `op` ("GPT", "GPT stage 0"): idx (B, T)
// Int64 with T >= 1 and past + T <= block_size, `past` tokens being cached
// before it. GPT and the first of its pipeline stages (nn/models/gpt_stages.h)
// both run it and embed(), so a stage computes exactly what GPT does.
void check_tokens(const Tensor& idx, int64_t past, int64_t block_size, const char* op);
// drop(wte(idx) + wpe(positions past .. past + T - 1)): idx (B, T) -> (B, T, E).
Tensor embed(Embedding& wte, Embedding& wpe, Dropout& drop, const Tensor& idx, int64_t past);

}  // namespace gpt

// How generate() picks each token.
struct GenerateOptions {
  double temperature = 1.0;        // logits are divided by it; 0 picks the most likely token (greedy)
  std::optional<int64_t> top_k{};  // sample among the k most likely tokens only (k >= 1)
  bool use_kv_cache = true;        // Note [KV cache and learned positions]; same tokens either way
  Generator* generator = nullptr;  // the sampling generator (the default generator when null)
};

class GPT : public Module {
 public:
  // Builds the model with GPT-2's initialisation: Linear and Embedding
  // weights ~ N(0, 0.02), biases 0, LayerNorms 1 and 0, and the residual
  // projections (attn.c_proj, mlp.c_proj) ~ N(0, 0.02 / sqrt(2 n_layer)),
  // drawn from the default generator. Throws as GPTConfig::validate.
  explicit GPT(const GPTConfig& config);

  // idx: (B, T) Int64 token ids in [0, vocab_size), 1 <= T <= block_size
  // -> logits (B, T, vocab_size). Dropout is active in training mode.
  Tensor forward(const Tensor& idx) override;
  // Mean cross entropy of forward(idx) against targets (B, T) Int64, as
  // nanoGPT: targets equal to -1 are ignored.
  Tensor loss(const Tensor& idx, const Tensor& targets);
  // The same loss from logits already computed: logits (B, T, V), targets (B, T).
  static Tensor loss_from_logits(const Tensor& logits, const Tensor& targets);

  // One empty KVCache per layer.
  std::vector<gpt::KVCache> new_cache() const;
  // The logits (B, V) of the next token after the cache's tokens and
  // `idx` (B, T): appends idx's keys and values to `cache`. Either the cache
  // is empty (a prefill, T <= block_size) or T is 1, and the cache holds
  // fewer than block_size tokens. Equal to forward(all tokens)[:, -1] up to
  // rounding. Runs under NoGradGuard; dropout as the module's mode says.
  Tensor next_token_logits(const Tensor& idx, std::vector<gpt::KVCache>& cache);

  // idx (B, T0) Int64, T0 >= 1, extended by max_new_tokens (>= 0) tokens
  // sampled one at a time -> (B, T0 + max_new_tokens) Int64. Runs in eval
  // mode under NoGradGuard, restoring the module's mode afterwards. Each
  // token conditions on at most the last block_size tokens (nanoGPT's
  // cropping; Note [KV cache and learned positions]). temperature 0 is
  // greedy; otherwise logits / temperature, then top-k filtering, then a
  // draw from the softmax with options.generator: a generator seeded the
  // same way gives the same tokens.
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, const GenerateOptions& options = {});

  // nanoGPT's get_num_params: the parameters, the tied weight once, less
  // the position embeddings when non_embedding (they are not compute).
  int64_t num_parameters(bool non_embedding = true) const;

  const GPTConfig config;
  // The submodules under their nanoGPT paths: transformer.{wte, wpe, drop, h, ln_f}, lm_head.
  std::shared_ptr<ModuleDict> transformer;
  std::shared_ptr<Embedding> wte;
  std::shared_ptr<Embedding> wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> h;
  std::vector<std::shared_ptr<gpt::Block>> blocks;  // h's blocks, typed
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<gpt::TiedLinear> lm_head;

 private:
  // The next token (B, 1) Int64 from last-position logits (B, V).
  Tensor pick_token(const Tensor& logits, const GenerateOptions& options) const;
};

}  // namespace kiln::nn
