// The fused attention front-end: validates, views the inputs as the
// (B, H, T, D) tensors the kernels take, and dispatches once
// (Note [Device dispatch]); and the dropout mask of Note [Fused attention].
#include "tensor/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tensor/factory.h"

namespace kiln::ops {
namespace {

// The dims before the last two: the batch dims of q, k and v.
Shape leading_dims(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// The (B, H) the kernels see for leading dims `lead`: the last leading dim
// is H, the others multiply into B (so a 3-d (N, T, D) input is B = 1,
// H = N). The flat (B * H) numbering of rows, and so the dropout mask, does
// not depend on how the leading dims are split.
std::pair<int64_t, int64_t> batch_and_heads(const Shape& lead) {
  if (lead.empty()) return {1, 1};
  int64_t b = 1;
  for (size_t i = 0; i + 1 < lead.size(); ++i) b *= lead[i];
  return {b, lead.back()};
}

// t (..., T, X) as the (B, H, T, X) tensor the kernels take: a view when
// its last dim is contiguous and the leading dims merge into B by strides,
// else a contiguous copy (Note [Attention layouts]).
Tensor as_4d(const Tensor& t, int64_t b, int64_t h) {
  const bool rows_contiguous = t.size(-1) <= 1 || t.stride(-1) == 1;
  return (rows_contiguous ? t : t.contiguous()).reshape({b, h, t.size(-2), t.size(-1)});
}

// An uninitialised (B, H, T, X) tensor whose memory orders (B, H, T) as
// `like`'s strides do, largest first (ties keep their order), with X
// innermost: for heads transposed out of a (B, T, H, D) projection that is
// (B, T, H, X) memory, which transposed back is contiguous. Contiguous when
// `like` is.
Tensor empty_ordered_like(int64_t b, int64_t h, int64_t t, int64_t x, const Tensor& like, TensorOptions options) {
  int64_t order[3] = {0, 1, 2};  // the (B, H, T) dims, outermost first
  std::stable_sort(order, order + 3, [&](int64_t i, int64_t j) { return like.stride(i) > like.stride(j); });
  const int64_t sizes[3] = {b, h, t};
  Tensor dense = Tensor::empty({sizes[order[0]], sizes[order[1]], sizes[order[2]], x}, options);
  Shape back(4);  // the inverse permutation
  for (int64_t i = 0; i < 3; ++i) back[order[i]] = i;
  back[3] = 3;
  return dense.permute(back);
}

// The mask as the kernels take it: (B, H, Tq, Tk), broadcast dims stride 0,
// Bool or of q's dtype.
Tensor mask_4d(const Tensor& mask, const Tensor& q, const Shape& scores_shape, int64_t b, int64_t h) {
  if (!mask.defined()) return mask;
  Tensor m = mask.dtype() == DType::Bool ? mask : mask.to(q.dtype());
  const int64_t tq = scores_shape[scores_shape.size() - 2], tk = scores_shape.back();
  // A view unless more than two leading dims broadcast in ways one stride
  // cannot express; then reshape copies.
  return m.expand(scores_shape).reshape({b, h, tq, tk});
}

}  // namespace

uint32_t attention_dropout_threshold(double p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "attention dropout: the probability must be in [0, 1], got ", p);
  return static_cast<uint32_t>(std::lround(p * 65536.0));
}

double attention_dropout_scale(uint32_t threshold) {
  return threshold >= 65536u ? 0.0 : 65536.0 / static_cast<double>(65536u - threshold);
}

Tensor attention_dropout_mask(const Shape& shape, double p, uint64_t seed, uint64_t offset, TensorOptions options) {
  const uint32_t threshold = attention_dropout_threshold(p);
  const double scale = attention_dropout_scale(threshold);
  const int64_t n = shape_numel(shape, "attention_dropout_mask");
  Tensor mask = Tensor::empty(shape, DType::Float64);
  double* m = mask.data<double>();
  for (int64_t e = 0; e < n; ++e) {
    m[e] = attention_dropout_keep(seed, offset, static_cast<uint64_t>(e), threshold) ? scale : 0.0;
  }
  return mask.to(options.dtype, options.device);
}

void check_attention_inputs(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& mask, double dropout_p) {
  KILN_CHECK(q.defined() && k.defined() && v.defined(), op, ": query, key or value is undefined");
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, op,
             ": expected query (..., Tq, D), key (..., Tk, D) and value (..., Tk, Dv) of at least 2 dims, got ",
             q.shape(), ", ", k.shape(), " and ", v.shape());
  KILN_CHECK(q.is_floating_point(), op, ": expected a floating query, got ", q.dtype());
  KILN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
             ": query, key and value must have one dtype, got ", q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  KILN_CHECK(k.device() == q.device() && v.device() == q.device(), op,
             ": query, key and value must be on one device, got ", q.device(), ", ", k.device(), " and ",
             v.device());
  KILN_CHECK(leading_dims(k) == leading_dims(q) && leading_dims(v) == leading_dims(q), op,
             ": query, key and value must have the same leading (batch, head) dims, got shapes ", q.shape(), ", ",
             k.shape(), " and ", v.shape());
  KILN_CHECK(k.size(-1) == q.size(-1), op, ": query and key must have the same last dim (D), got query ",
             q.shape(), " and key ", k.shape());
  KILN_CHECK(v.size(-2) == k.size(-2), op, ": key and value must have the same number of keys (Tk), got key ",
             k.shape(), " and value ", v.shape());
  KILN_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": dropout_p must be in [0, 1], got ", dropout_p);
  if (!mask.defined()) return;
  KILN_CHECK(mask.dtype() == DType::Bool || mask.is_floating_point(), op,
             ": attn_mask must be Bool (true = attend) or floating (added to the scores), got ", mask.dtype());
  KILN_CHECK(mask.device() == q.device(), op, ": attn_mask is on ", mask.device(), " but the query is on ",
             q.device());
  Shape scores = leading_dims(q);
  scores.push_back(q.size(-2));
  scores.push_back(k.size(-2));
  bool broadcasts = mask.dim() <= static_cast<int64_t>(scores.size());
  for (int64_t i = 1; broadcasts && i <= mask.dim(); ++i) {
    const int64_t m = mask.size(-i), s = scores[scores.size() - static_cast<size_t>(i)];
    broadcasts = m == 1 || m == s;
  }
  KILN_CHECK(broadcasts, op, ": attn_mask of shape ", mask.shape(), " does not broadcast to the scores' shape ",
             scores, " (..., Tq, Tk)");
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const AttentionParams& params) {
  check_attention_inputs("attention", q, k, v, mask, params.dropout_p);
  const Shape lead = leading_dims(q);
  const auto [b, h] = batch_and_heads(lead);
  const int64_t tq = q.size(-2), dv = v.size(-1);
  Shape scores = lead, out_shape = lead, lse_shape = lead;
  scores.insert(scores.end(), {tq, k.size(-2)});
  out_shape.insert(out_shape.end(), {tq, dv});
  lse_shape.push_back(tq);
  const DType lse_dtype = q.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  const Tensor q4 = as_4d(q, b, h);
  // The output in q's memory order: splitting B back into the leading dims
  // is always a view.
  const Tensor out4 = empty_ordered_like(b, h, tq, dv, q4, {q.dtype(), q.device()});
  AttentionResult r{out4.view(out_shape), Tensor::empty(lse_shape, {lse_dtype, q.device()})};
  if (r.out.numel() == 0) return r;
  backend_for(q.device())
      .attention(out4, r.logsumexp.view({b, h, tq}), q4, as_4d(k, b, h), as_4d(v, b, h),
                 mask_4d(mask, q, scores, b, h), params);
  return r;
}

AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, const AttentionResult& forward, const AttentionParams& params) {
  check_attention_inputs("attention_backward", q, k, v, mask, params.dropout_p);
  KILN_CHECK(grad_out.defined() && grad_out.shape() == forward.out.shape(),
             "attention_backward: expected grad_out of the output's shape ", forward.out.shape(), ", got ",
             grad_out.defined() ? grad_out.shape() : Shape{});
  KILN_CHECK(grad_out.device() == q.device(), "attention_backward: grad_out is on ", grad_out.device(),
             " but the query is on ", q.device());
  const Shape lead = leading_dims(q);
  const auto [b, h] = batch_and_heads(lead);
  Shape scores = lead;
  scores.insert(scores.end(), {q.size(-2), k.size(-2)});
  const int64_t tq = q.size(-2), tk = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const Tensor q4 = as_4d(q, b, h), k4 = as_4d(k, b, h), v4 = as_4d(v, b, h);
  // Each gradient in its input's memory order.
  const TensorOptions options{q.dtype(), q.device()};
  const Tensor grad_q4 = empty_ordered_like(b, h, tq, d, q4, options),
               grad_k4 = empty_ordered_like(b, h, tk, d, k4, options),
               grad_v4 = empty_ordered_like(b, h, tk, dv, v4, options);
  AttentionGrads g{grad_q4.view(q.shape()), grad_k4.view(k.shape()), grad_v4.view(v.shape())};
  if (q.numel() + k.numel() + v.numel() == 0) return g;
  backend_for(q.device())
      .attention_backward(grad_q4, grad_k4, grad_v4, as_4d(grad_out.to(q.dtype()), b, h), q4, k4, v4,
                          as_4d(forward.out, b, h), forward.logsumexp.contiguous().view({b, h, tq}),
                          mask_4d(mask, q, scores, b, h), params);
  return g;
}

}  // namespace kiln::ops
