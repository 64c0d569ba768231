#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <string>

#include "nn/functional.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

namespace F = functional;

namespace {

constexpr const char* kOp = "MultiheadAttention";

// torch's Bool masks say where NOT to attend, scaled_dot_product_attention's
// where to attend: the flip, or a floating mask as it is.
Tensor attend_where(const Tensor& m) { return m.dtype() == DType::Bool ? ops::logical_not(m) : m; }

// A mask as an additive floating one: Bool (true = attend) becomes 0 / -inf.
Tensor additive(const Tensor& keep_or_add, DType dtype) {
  if (keep_or_add.dtype() != DType::Bool) return keep_or_add;
  const Tensor minus_inf = full({}, -std::numeric_limits<double>::infinity(), {dtype, keep_or_add.device()});
  return ops::where(ops::logical_not(keep_or_add), minus_inf, 0.0);
}

// key_padding_mask (N, S) and attn_mask ((L, S) or (N * H, L, S)) as one
// scaled_dot_product_attention mask broadcastable to (N, H, L, S).
Tensor combined_mask(const Tensor& key_padding_mask, const Tensor& attn_mask, int64_t n, int64_t h, int64_t l,
                     int64_t s, DType dtype) {
  Tensor padding, attn;
  if (key_padding_mask.defined()) {
    KILN_CHECK(key_padding_mask.shape() == (Shape{n, s}), kOp, ": expected key_padding_mask of shape ",
               Shape{n, s}, " (N, S), got ", key_padding_mask.shape());
    padding = attend_where(key_padding_mask).view({n, 1, 1, s});
  }
  if (attn_mask.defined()) {
    const bool per_head = attn_mask.dim() == 3;
    KILN_CHECK(attn_mask.shape() == (Shape{l, s}) || attn_mask.shape() == (Shape{n * h, l, s}), kOp,
               ": expected attn_mask of shape ", Shape{l, s}, " (L, S) or ", Shape{n * h, l, s},
               " (N * num_heads, L, S), got ", attn_mask.shape());
    attn = attend_where(per_head ? attn_mask.view({n, h, l, s}) : attn_mask);
  }
  if (!padding.defined() || !attn.defined()) return padding.defined() ? padding : attn;
  if (padding.dtype() == DType::Bool && attn.dtype() == DType::Bool) return ops::logical_and(padding, attn);
  return kiln::add(additive(padding, dtype), additive(attn, dtype));
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options)
    : embed_dim(embed_dim),
      num_heads(num_heads),
      head_dim(num_heads > 0 ? embed_dim / num_heads : 0),
      options(options) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0, kOp, ": embed_dim and num_heads must be positive, got ", embed_dim,
             " and ", num_heads);
  KILN_CHECK(embed_dim % num_heads == 0, kOp, ": embed_dim (", embed_dim, ") must be divisible by num_heads (",
             num_heads, ")");
  KILN_CHECK(options.dropout >= 0.0 && options.dropout <= 1.0, kOp, ": dropout must be in [0, 1], got ",
             options.dropout);
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  in_proj_bias = register_parameter("in_proj_bias", options.bias ? empty({3 * embed_dim}) : Tensor());
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, options.bias));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  out_proj->reset_parameters();
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward_many({x, x, x})[0]; }

TensorList MultiheadAttention::forward_many(const TensorList& inputs) {
  KILN_CHECK(inputs.size() == 1 || (inputs.size() >= 3 && inputs.size() <= 5), kOp,
             ": expected {x} or {query, key, value[, key_padding_mask[, attn_mask]]}, got ", inputs.size(),
             " tensors");
  Tensor query = inputs[0];
  Tensor key = inputs.size() > 1 ? inputs[1] : query, value = inputs.size() > 1 ? inputs[2] : query;
  Tensor key_padding_mask = inputs.size() > 3 ? inputs[3] : Tensor();
  const Tensor attn_mask = inputs.size() > 4 ? inputs[4] : Tensor();
  KILN_CHECK(query.defined() && key.defined() && value.defined(), kOp, ": query, key or value is undefined");
  KILN_CHECK(query.dim() == 2 || query.dim() == 3, kOp, ": expected a query of shape ",
             options.batch_first ? "(N, L, E)" : "(L, N, E)", " or (L, E), got ", query.shape());
  KILN_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), kOp,
             ": query, key and value must have the same number of dims, got ", query.shape(), ", ", key.shape(),
             " and ", value.shape());
  KILN_CHECK(query.size(-1) == embed_dim && key.size(-1) == embed_dim && value.size(-1) == embed_dim, kOp,
             ": expected query, key and value with embed_dim ", embed_dim, " as the last dim, got ", query.shape(),
             ", ", key.shape(), " and ", value.shape());
  // Everything below is batch-first and batched: (N, L, E).
  const bool self_attention = query.is_same(key) && key.is_same(value);
  const bool unbatched = query.dim() == 2;
  if (unbatched) {
    query = query.unsqueeze(0);
    key = key.unsqueeze(0);
    value = value.unsqueeze(0);
    if (key_padding_mask.defined() && key_padding_mask.dim() == 1) key_padding_mask = key_padding_mask.unsqueeze(0);
  } else if (!options.batch_first) {
    query = query.transpose(0, 1);
    key = key.transpose(0, 1);
    value = value.transpose(0, 1);
  }
  const int64_t n = query.size(0), l = query.size(1), s = key.size(1), h = num_heads, hd = head_dim;
  KILN_CHECK(key.size(0) == n && value.size(0) == n && value.size(1) == s, kOp,
             ": key and value must have the query's batch size and the same length, got query ", inputs[0].shape(),
             ", key ", inputs.size() > 1 ? inputs[1].shape() : inputs[0].shape(), " and value ",
             inputs.size() > 1 ? inputs[2].shape() : inputs[0].shape());

  // The projections: one product when query, key and value are one tensor.
  Tensor q, k, v;  // (N, L or S, E)
  if (self_attention) {
    std::vector<Tensor> qkv = kiln::chunk(F::linear(query, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    std::vector<Tensor> w = kiln::chunk(in_proj_weight, 3, 0);
    std::vector<Tensor> b = in_proj_bias.defined() ? kiln::chunk(in_proj_bias, 3, 0) : std::vector<Tensor>(3);
    q = F::linear(query, w[0], b[0]);
    k = F::linear(key, w[1], b[1]);
    v = F::linear(value, w[2], b[2]);
  }
  // (N, T, E) -> (N, H, T, hd)
  auto heads = [&](const Tensor& t) { return t.reshape({n, t.size(1), h, hd}).transpose(1, 2); };
  const Tensor qh = heads(q), kh = heads(k), vh = heads(v);
  const Tensor mask = combined_mask(key_padding_mask, attn_mask, n, h, l, s, q.dtype());
  F::ScaledDotProductAttentionOptions attention{.attn_mask = mask,
                                                .dropout_p = is_training() ? options.dropout : 0.0,
                                                .is_causal = is_causal,
                                                .generator = options.generator};
  // (N, H, L, hd) -> (N, L, E)
  Tensor out = F::scaled_dot_product_attention(qh, kh, vh, attention).transpose(1, 2).reshape({n, l, embed_dim});
  out = (*out_proj)(out);
  if (unbatched) {
    out = out.squeeze(0);
  } else if (!options.batch_first) {
    out = out.transpose(0, 1);
  }
  if (!need_weights) return {out};
  attention.dropout_p = 0.0;
  Tensor weights = F::scaled_dot_product_attention_weights(qh, kh, attention);  // (N, H, L, S)
  if (average_attn_weights) weights = kiln::mean(weights, {1});
  if (unbatched) weights = weights.squeeze(0);
  return {out, weights};
}

std::string MultiheadAttention::extra_repr() const {
  return "embed_dim=" + std::to_string(embed_dim) + ", num_heads=" + std::to_string(num_heads) +
         ", dropout=" + repr::floating(options.dropout) + ", batch_first=" + repr::boolean(options.batch_first);
}

}  // namespace kiln::nn
