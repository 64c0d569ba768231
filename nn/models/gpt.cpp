#include "nn/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

namespace F = functional;

// ---- GPTConfig ----

void GPTConfig::validate() const {
  KILN_CHECK(vocab_size > 0, "GPT: vocab_size must be positive, got ", vocab_size);
  KILN_CHECK(block_size > 0, "GPT: block_size must be positive, got ", block_size);
  KILN_CHECK(n_layer > 0, "GPT: n_layer must be positive, got ", n_layer);
  KILN_CHECK(n_head > 0, "GPT: n_head must be positive, got ", n_head);
  KILN_CHECK(n_embd > 0, "GPT: n_embd must be positive, got ", n_embd);
  KILN_CHECK(n_embd % n_head == 0, "GPT: n_embd ", n_embd, " is not a multiple of n_head ", n_head,
             " (each head takes n_embd / n_head channels)");
  KILN_CHECK(dropout >= 0.0 && dropout < 1.0, "GPT: dropout must be in [0, 1), got ", dropout);
}

int64_t GPTConfig::num_parameters() const {
  const int64_t E = n_embd;
  // Per block: ln_1 and ln_2 (E each), c_attn (3E x E), attn.c_proj (E x E),
  // c_fc (4E x E), mlp.c_proj (E x 4E); with biases also 2E + 3E + E + 4E + E.
  const int64_t per_block = 12 * E * E + 2 * E + (bias ? 11 * E : 0);
  const int64_t ln_f = bias ? 2 * E : E;
  return vocab_size * E + block_size * E + n_layer * per_block + ln_f;
}

namespace gpt {

// ---- CausalSelfAttention ----

namespace {

// The heads move between c_attn, the fused attention and c_proj without
// copies (Note [Attention layouts] in tensor/attention.h): q, k and v are
// strided views of c_attn's output, and the attention's output, laid out as
// (B, T, H, D), is c_proj's input as it is. Each direction is one autograd
// node rather than a chain of views: a view's backward other than a plain
// reshape scatters the gradient into zeros of its base's shape, which for
// split -> reshape -> transpose would zero-fill and copy every head's
// gradient twice more on its way back.

// qkv (B, T, 3E) -> q, k, v, each (B, H, T, D), views of qkv. The backward
// joins the three gradients into (B, T, 3E) with one copy (split's backward
// would too); the fused attention gives them in (B, T, H, D) memory, where
// the transpose back is contiguous and the reshape a view.
std::vector<Tensor> split_heads(const Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), E = qkv.size(2) / 3, D = E / n_head;
  std::vector<Tensor> heads = autograd::untracked([&] {
    std::vector<Tensor> pieces = split(qkv, E, 2);                          // 3 x (B, T, E)
    for (Tensor& t : pieces) t = t.view({B, T, n_head, D}).transpose(1, 2);  // (B, H, T, D)
    return pieces;
  });
  if (autograd::needs_grad({qkv})) {
    autograd::record("split_heads", {qkv}, heads, [B, T, E](const TensorList& g) -> TensorList {
      std::vector<Tensor> pieces;
      for (const Tensor& gi : g) pieces.push_back(gi.transpose(1, 2).reshape({B, T, E}));
      return {cat(pieces, 2)};  // (B, T, 3E)
    });
  }
  return heads;
}

// y (B, H, T, D) -> (B, T, H * D), the heads side by side: a view when y is
// laid out as (B, T, H, D), as the fused attention's output is (a copy
// otherwise). The backward views the gradient back, with no copy.
Tensor merge_heads_of(const Tensor& y) {
  const int64_t B = y.size(0), H = y.size(1), T = y.size(2), D = y.size(3);
  Tensor merged = autograd::untracked([&] { return y.transpose(1, 2).reshape({B, T, H * D}); });
  if (autograd::needs_grad({y})) {
    autograd::record("merge_heads", {y}, {merged}, [B, H, T, D](const TensorList& g) -> TensorList {
      return {g[0].reshape({B, T, H, D}).transpose(1, 2)};
    });
  }
  return merged;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config)
    : n_head(config.n_head), n_embd(config.n_embd), block_size(config.block_size), dropout(config.dropout) {
  c_attn = register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd, config.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd, config.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(config.dropout));
}

std::vector<Tensor> CausalSelfAttention::heads(const Tensor& x) {
  KILN_CHECK(x.dim() == 3 && x.size(2) == n_embd, "CausalSelfAttention: expected x of shape (B, T, ", n_embd,
             "), got ", x.shape());
  // The projections are called through the registry, so that a layer put in
  // their place (quant::quantize_dynamic's int8 Linear) is the one that runs.
  return split_heads((*get_submodule("c_attn"))(x), n_head);  // 3 x (B, H, T, D), views of c_attn's (B, T, 3E)
}

Tensor CausalSelfAttention::merge_heads(const Tensor& y) {
  return (*resid_dropout)((*get_submodule("c_proj"))(merge_heads_of(y)));  // (B, T, E)
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  std::vector<Tensor> qkv = heads(x);
  Tensor y = F::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2],
                                             {.dropout_p = is_training() ? dropout : 0.0, .is_causal = true});
  return merge_heads(y);  // (B, T, E)
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, KVCache& cache) {
  NoGradGuard no_grad;
  const int64_t past = cache.length;
  const int64_t T = x.dim() == 3 ? x.size(1) : 0;
  KILN_CHECK(past == 0 || T == 1, "CausalSelfAttention: with ", past,
             " cached tokens, one new token is attended at a time, got ", T);
  KILN_CHECK(past + T <= block_size, "CausalSelfAttention: ", past, " cached and ", T,
             " new tokens exceed block_size ", block_size);
  std::vector<Tensor> qkv = heads(x);  // 3 x (B, H, T, D)
  const Tensor& k = qkv[1];
  const Shape buffer_shape{k.size(0), n_head, block_size, k.size(3)};
  if (past == 0) {
    // A prefill starts the cache afresh, reusing its buffers when they fit.
    if (!cache.keys.defined() || cache.keys.shape() != buffer_shape || cache.keys.dtype() != k.dtype() ||
        cache.keys.device() != k.device()) {
      cache.keys = empty(buffer_shape, TensorOptions(k.dtype(), k.device()));
      cache.values = empty(buffer_shape, TensorOptions(k.dtype(), k.device()));
    }
  } else {
    KILN_CHECK(cache.keys.shape() == buffer_shape && cache.keys.dtype() == k.dtype(),
               "CausalSelfAttention: the cache holds keys ", cache.keys.shape(), " ", cache.keys.dtype(),
               ", which new keys ", k.shape(), " ", k.dtype(), " cannot extend");
  }
  cache.keys.narrow(2, past, T).copy_(k);
  cache.values.narrow(2, past, T).copy_(qkv[2]);
  cache.length = past + T;
  // A prefill is causal among its own tokens; a single new token is the
  // last one and attends every key, so it needs no mask.
  Tensor y = F::scaled_dot_product_attention(
      qkv[0], cache.keys.narrow(2, 0, cache.length), cache.values.narrow(2, 0, cache.length),
      {.dropout_p = is_training() ? dropout : 0.0, .is_causal = T > 1});
  return merge_heads(y);  // (B, T, E)
}

// ---- MLP and Block ----

MLP::MLP(const GPTConfig& config) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor MLP::forward(const Tensor& x) {
  // Through the registry, as CausalSelfAttention's projections.
  Tensor hidden = F::gelu((*get_submodule("c_fc"))(x));  // (B, T, 4E), the exact (erf) GELU, as nn.GELU()
  return (*dropout)((*get_submodule("c_proj"))(hidden));
}

Block::Block(const GPTConfig& config) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, config.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, config.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(config));
}

Tensor Block::forward(const Tensor& x) {
  Tensor h = x + (*attn)((*ln_1)(x));
  return h + (*mlp)((*ln_2)(h));
}

Tensor Block::forward_cached(const Tensor& x, KVCache& cache) {
  Tensor h = x + attn->forward_cached((*ln_1)(x), cache);
  return h + (*mlp)((*ln_2)(h));
}

// ---- TiedLinear ----

TiedLinear::TiedLinear(Tensor tied) {
  KILN_CHECK(tied.defined() && tied.dim() == 2, "TiedLinear: the weight must be a 2-d tensor, got ",
             tied.defined() ? tied.shape() : Shape{});
  weight = register_parameter("weight", std::move(tied));
}

Tensor TiedLinear::forward(const Tensor& x) { return F::linear(x, weight); }

std::string TiedLinear::extra_repr() const {
  return "in_features=" + std::to_string(weight.size(1)) + ", out_features=" + std::to_string(weight.size(0)) +
         ", bias=" + repr::boolean(false);
}

}  // namespace gpt

// ---- GPT ----

namespace {

const GPTConfig& validated(const GPTConfig& config) {
  config.validate();
  return config;
}

// Sets the module's training mode for a scope and restores it after, even
// when the scope throws.
class ModeGuard {
 public:
  ModeGuard(Module& module, bool training) : module_(module), previous_(module.is_training()) {
    module_.train(training);
  }
  ~ModeGuard() { module_.train(previous_); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  Module& module_;
  bool previous_;
};

}  // namespace

GPT::GPT(const GPTConfig& config_in) : config(validated(config_in)) {
  const int64_t E = config.n_embd;
  wte = std::make_shared<Embedding>(config.vocab_size, E);
  wpe = std::make_shared<Embedding>(config.block_size, E);
  drop = std::make_shared<Dropout>(config.dropout);
  h = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < config.n_layer; ++i) {
    blocks.push_back(std::make_shared<gpt::Block>(config));
    h->push_back(blocks.back());
  }
  ln_f = std::make_shared<LayerNorm>(E, 1e-5, true, config.bias);
  transformer = register_module("transformer", std::make_shared<ModuleDict>(std::vector<NamedModule>{
                                                   {"wte", wte}, {"wpe", wpe}, {"drop", drop}, {"h", h}, {"ln_f", ln_f}}));
  lm_head = register_module("lm_head", std::make_shared<gpt::TiedLinear>(wte->weight));

  // GPT-2's initialisation (nanoGPT's _init_weights). The residual
  // projections write into the residual stream once per block and
  // attention/MLP, 2 * n_layer times in all; scaling their std by
  // 1/sqrt(2 n_layer) keeps the stream's variance at the output independent of depth.
  const double std = 0.02;
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  init::normal_(wte->weight, 0.0, std);
  init::normal_(wpe->weight, 0.0, std);
  auto init_linear = [](const std::shared_ptr<Linear>& linear, double weight_std) {
    init::normal_(linear->weight, 0.0, weight_std);
    if (linear->bias.defined()) init::zeros_(linear->bias);
  };
  for (const auto& block : blocks) {
    init_linear(block->attn->c_attn, std);
    init_linear(block->attn->c_proj, residual_std);
    init_linear(block->mlp->c_fc, std);
    init_linear(block->mlp->c_proj, residual_std);
  }
}

namespace gpt {

void check_tokens(const Tensor& idx, int64_t past, int64_t block_size, const char* op) {
  KILN_CHECK(idx.dtype() == DType::Int64, op, ": idx must hold Int64 token ids, got ", idx.dtype());
  KILN_CHECK(idx.dim() == 2 && idx.size(1) >= 1, op, ": idx must have shape (B, T) with T >= 1, got ",
             idx.shape());
  const int64_t T = idx.size(1);
  if (past == 0) {
    KILN_CHECK(T <= block_size, op, ": cannot forward a sequence of length ", T, ", block_size is only ",
               block_size);
  } else {
    KILN_CHECK(past + T <= block_size, op, ": cannot forward ", T, " tokens after ", past,
               " cached ones, block_size is only ", block_size);
  }
}

Tensor embed(Embedding& wte, Embedding& wpe, Dropout& drop, const Tensor& idx, int64_t past) {
  const int64_t T = idx.size(1);
  Tensor positions = arange(past, past + T, 1, TensorOptions(DType::Int64, idx.device()));  // (T)
  Tensor tok = wte(idx);        // (B, T, E)
  Tensor pos = wpe(positions);  // (T, E), broadcast over the batch
  return drop(tok + pos);
}

}  // namespace gpt

Tensor GPT::forward(const Tensor& idx) {
  gpt::check_tokens(idx, 0, config.block_size, "GPT");
  Tensor x = gpt::embed(*wte, *wpe, *drop, idx, 0);  // (B, T, E)
  for (const auto& block : blocks) x = (*block)(x);
  return (*lm_head)((*ln_f)(x));  // (B, T, V)
}

Tensor GPT::loss_from_logits(const Tensor& logits, const Tensor& targets) {
  KILN_CHECK(logits.dim() == 3 && targets.dim() == 2 && targets.size(0) == logits.size(0) &&
                 targets.size(1) == logits.size(1),
             "GPT::loss: logits (B, T, V) and targets (B, T) do not match: ", logits.shape(), " and ",
             targets.shape());
  return F::cross_entropy(logits.reshape({-1, logits.size(2)}), targets.reshape({-1}), {.ignore_index = -1});
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) { return loss_from_logits(forward(idx), targets); }

std::vector<gpt::KVCache> GPT::new_cache() const { return std::vector<gpt::KVCache>(blocks.size()); }

Tensor GPT::next_token_logits(const Tensor& idx, std::vector<gpt::KVCache>& cache) {
  NoGradGuard no_grad;
  KILN_CHECK(cache.size() == blocks.size(), "GPT::next_token_logits: the cache has ", cache.size(),
             " layers, the model ", blocks.size(), " (make it with new_cache())");
  const int64_t past = cache[0].length;
  gpt::check_tokens(idx, past, config.block_size, "GPT::next_token_logits");
  const int64_t T = idx.size(1);
  KILN_CHECK(past == 0 || T == 1, "GPT::next_token_logits: with ", past,
             " cached tokens, one new token is run at a time, got ", T);
  Tensor x = gpt::embed(*wte, *wpe, *drop, idx, past);  // (B, T, E)
  for (size_t l = 0; l < blocks.size(); ++l) x = blocks[l]->forward_cached(x, cache[l]);
  // Only the last position's logits are needed: ln_f and the head are per
  // position, so the other T - 1 rows (T x V products each) are skipped.
  return (*lm_head)((*ln_f)(x.select(1, T - 1)));  // (B, V)
}

Tensor GPT::pick_token(const Tensor& logits, const GenerateOptions& options) const {
  if (options.temperature == 0.0) return argmax(logits, -1, /*keepdim=*/true);  // (B, 1)
  Tensor scaled = logits / options.temperature;
  if (options.top_k) {
    const int64_t k = std::min(*options.top_k, logits.size(-1));
    Tensor kth = topk(scaled, k).values.narrow(-1, k - 1, 1);  // (B, 1): the k-th largest logit
    scaled = masked_fill(scaled, lt(scaled, kth), -std::numeric_limits<double>::infinity());
  }
  return multinomial(F::softmax(scaled, -1), 1, /*replacement=*/false, options.generator);  // (B, 1)
}

Tensor GPT::generate(const Tensor& idx, int64_t max_new_tokens, const GenerateOptions& options) {
  // A prompt may be longer than block_size: only its last block_size tokens are used.
  KILN_CHECK(idx.dtype() == DType::Int64, "GPT::generate: idx must hold Int64 token ids, got ", idx.dtype());
  KILN_CHECK(idx.dim() == 2 && idx.size(1) >= 1, "GPT::generate: idx must have shape (B, T) with T >= 1, got ",
             idx.shape());
  KILN_CHECK(max_new_tokens >= 0, "GPT::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  KILN_CHECK(std::isfinite(options.temperature) && options.temperature >= 0.0,
             "GPT::generate: temperature must be finite and >= 0, got ", options.temperature);
  KILN_CHECK(!options.top_k || *options.top_k >= 1, "GPT::generate: top_k must be >= 1, got ",
             options.top_k.value_or(0));
  NoGradGuard no_grad;
  ModeGuard eval_mode(*this, false);
  const int64_t B = idx.size(0), T0 = idx.size(1), block = config.block_size;
  Tensor out = empty({B, T0 + max_new_tokens}, TensorOptions(DType::Int64, idx.device()));  // (B, T0 + new)
  out.narrow(1, 0, T0).copy_(idx);
  // The last min(len, block_size) tokens of the first `len`: what the next
  // token is conditioned on (nanoGPT's idx[:, -block_size:]).
  auto window = [&](int64_t len) {
    const int64_t w = std::min(len, block);
    return out.narrow(1, len - w, w).contiguous();  // (B, w)
  };
  std::vector<gpt::KVCache> cache;
  for (int64_t len = T0; len < T0 + max_new_tokens; ++len) {
    Tensor logits;  // (B, V): the next token's
    if (!options.use_kv_cache) {
      Tensor cond = window(len);
      logits = forward(cond).select(1, cond.size(1) - 1);
    } else if (cache.empty() || cache[0].length == block) {
      // The first token, or the window slid: every position moved, so the
      // cache is rebuilt (Note [KV cache and learned positions]).
      cache = new_cache();
      logits = next_token_logits(window(len), cache);
    } else {
      logits = next_token_logits(out.narrow(1, len - 1, 1).contiguous(), cache);
    }
    out.narrow(1, len, 1).copy_(pick_token(logits, options));
  }
  return out;
}

int64_t GPT::num_parameters(bool non_embedding) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return non_embedding ? n - wpe->weight.numel() : n;
}

}  // namespace kiln::nn
