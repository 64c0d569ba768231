// MultiheadAttention, as torch.nn.MultiheadAttention: project the query,
// key and value, attend per head with scaled_dot_product_attention (the
// fused kernels, Note [Fused attention] in tensor/attention.h), concatenate
// the heads and project the result.
//
//   auto attn = std::make_shared<nn::MultiheadAttention>(128, 4, nn::MultiheadAttentionOptions{.dropout = 0.1});
//   attn->is_causal = true;
//   Tensor y = (*attn)(x);                                          // self-attention, x: (N, L, 128)
//   TensorList out = (*attn)({q, k, v, key_padding_mask});          // {output (N, L, 128)}
//   attn->need_weights = true;
//   TensorList both = (*attn)({q, k, v});                           // {output, weights (N, L, S)}
#pragma once

#include <cstdint>

#include "nn/linear.h"
#include "nn/module.h"
#include "tensor/random.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;          // on the attention probabilities, in training
  bool bias = true;              // in_proj_bias and out_proj.bias
  bool batch_first = true;       // (N, L, E); false: (L, N, E). torch's default is false
  Generator* generator = nullptr;  // dropout's (the default generator when null)
};

// Parameters, named and initialised as torch's: "in_proj_weight" (3E, E),
// xavier_uniform_; "in_proj_bias" (3E), zeros; "out_proj.weight" (E, E) as
// a Linear's; "out_proj.bias" (E), zeros. The query, key and value have the
// embedding dim E (torch's kdim = vdim = embed_dim; separate q/k/v
// projection weights, add_bias_kv and add_zero_attn are not offered).
//
// Called with a list (Note [Modules of several tensors] in nn/module.h):
//   {query, key, value[, key_padding_mask[, attn_mask]]}, a mask may be an
//   undefined Tensor; or with one tensor x, which is query, key and value.
// query (N, L, E), key and value (N, S, E) (batch_first; (L, N, E) and
// (S, N, E) otherwise; unbatched (L, E) and (S, E) too). The masks follow
// torch's MultiheadAttention, which is the opposite of
// scaled_dot_product_attention's for Bool:
//   key_padding_mask (N, S): Bool, true = padding, ignored; or floating, added.
//   attn_mask (L, S) or (N * num_heads, L, S): Bool, true = NOT attended; or
//   floating, added.
// Returns {output} with the query's shape, or {output, weights} when
// need_weights: the attention probabilities (N, L, S) averaged over the
// heads, or (N, num_heads, L, S) when !average_attn_weights, before dropout
// (torch returns them after dropout; they agree in eval). A query row that
// attends to no key gives zeros (torch: NaN).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options = {});

  TensorList forward_many(const TensorList& inputs) override;
  // Self-attention: forward_many({x, x, x})[0].
  Tensor forward(const Tensor& x) override;
  // "embed_dim=128, num_heads=4, dropout=0.1, batch_first=True"
  std::string extra_repr() const override;
  // Draws the parameters afresh, as at construction.
  void reset_parameters();

  // The call's flags, which are not tensors: set them before the call.
  bool is_causal = false;             // query i attends keys j <= i (with any masks)
  bool need_weights = false;          // torch's default is true; it costs the (L, S) probabilities
  bool average_attn_weights = true;

  const int64_t embed_dim, num_heads, head_dim;
  const MultiheadAttentionOptions options;
  Tensor in_proj_weight;
  Tensor in_proj_bias;
  std::shared_ptr<Linear> out_proj;
};

}  // namespace kiln::nn
