// scaled_dot_product_attention: the fused kernels of tensor/attention.h as
// one autograd node, and beside them the reference written with
// differentiable ops, which the tests compare the fused op against and which
// runs whatever the kernels do not cover (Note [Fused attention]).
//
// The node's backward runs the fused backward kernel in ordinary training
// and, when the backward itself is being recorded (create_graph), the same
// formulas written with differentiable ops (Note [Backward kernels and
// double backward] in nn/functional.h): with P the probabilities, F the
// dropout factors (ones without dropout) and g the incoming gradient,
//   dV = (P * F)^T g,  dP = (g V^T) * F,  dS = P * (dP - rowsum(dP * P)),
//   dQ = scale * dS K,  dK = scale * dS^T Q.
#include <cmath>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "tensor/attention.h"
#include "tensor/factory.h"

namespace kiln::nn::functional {

using autograd::SavedTensor;
using autograd::TensorList;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr double kInf = std::numeric_limits<double>::infinity();

double scale_of(const Tensor& q, const ScaledDotProductAttentionOptions& options) {
  return options.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

// The Philox key and first counter block of one call's dropout mask: both
// paths reserve the same blocks, so that they drop the same probabilities
// for the same generator state.
struct DropoutDraw {
  uint64_t seed = 0, offset = 0;
};
DropoutDraw reserve_dropout(const Tensor& q, const Tensor& k, const ScaledDotProductAttentionOptions& options) {
  if (options.dropout_p <= 0.0) return {};
  Generator& g = options.generator ? *options.generator : default_generator();
  // B * H * Tq * Tk probabilities: the leading dims times both T.
  const int64_t rows = shape_numel(Shape(q.shape().begin(), q.shape().end() - 1));
  const uint64_t seed = g.seed();
  return {seed, g.advance(ops::attention_dropout_blocks(rows * k.size(-2)))};
}

// softmax(scale * q k^T + mask) (..., Tq, Tk) through differentiable ops;
// rows that attend to nothing are zeros.
Tensor reference_probabilities(const Tensor& q, const Tensor& k, const Tensor& mask, double scale, bool causal) {
  const int64_t tq = q.size(-2), tk = k.size(-2);
  Tensor scores = kiln::mul(kiln::matmul(q, k.transpose(-2, -1)), scale);  // (..., Tq, Tk)
  if (tk == 0) return scores;
  if (mask.defined() && mask.is_floating_point()) scores = kiln::add(scores, mask.to(scores.dtype()));
  Tensor keep;  // Bool, broadcastable to the scores, or undefined
  if (causal) {
    const Tensor i = arange(tq, {DType::Int64, q.device()}).unsqueeze(1), j = arange(tk, {DType::Int64, q.device()});
    keep = ops::ge(i, j);  // (Tq, Tk): j <= i
  }
  if (mask.defined() && mask.dtype() == DType::Bool) keep = keep.defined() ? ops::logical_and(keep, mask) : mask;
  if (keep.defined()) scores = kiln::where(keep, scores, -kInf);
  if (!mask.defined()) return kiln::softmax(scores, -1);  // causal rows always see key 0
  // A row whose scores are all -inf attends to nothing and gives zeros (a
  // softmax over it would be NaN); softmax sees zeros there instead, so
  // that no NaN reaches the backward either.
  const Tensor live = ops::gt(ops::amax(scores.detach(), {-1}, /*keepdim=*/true), -kInf);  // (..., Tq, 1)
  return kiln::where(live, kiln::softmax(kiln::where(live, scores, 0.0), -1), 0.0);
}

// The dropout factors of probabilities p, or undefined without dropout.
Tensor dropout_factors(const Tensor& p, const AttentionParams& params) {
  if (params.dropout_p <= 0.0) return Tensor();
  return ops::attention_dropout_mask(p.shape(), params.dropout_p, params.seed, params.offset,
                                     {p.dtype(), p.device()});
}

// The backward as differentiable ops (create_graph), from the formulas at the top.
TensorList attention_backward_recorded(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& mask, const AttentionParams& params) {
  const Tensor p = reference_probabilities(q, k, mask, params.scale, params.causal);
  const Tensor factors = dropout_factors(p, params);
  const Tensor kept = factors.defined() ? kiln::mul(p, factors) : p;
  Tensor grad_v = kiln::matmul(kept.transpose(-2, -1), g);
  Tensor dp = kiln::matmul(g, v.transpose(-2, -1));
  if (factors.defined()) dp = kiln::mul(dp, factors);
  const Tensor ds = kiln::mul(p, kiln::sub(dp, kiln::sum(kiln::mul(dp, p), {-1}, /*keepdim=*/true)));
  return {kiln::mul(kiln::matmul(ds, k), params.scale), kiln::mul(kiln::matmul(ds.transpose(-2, -1), q), params.scale),
          grad_v};
}

// Whether the fused kernels take this call: floating inputs on the CPU or a
// GPU (head dims up to kCudaAttentionMaxHeadDim there), and no floating
// mask that wants a gradient (the kernels give none).
bool fused_kernel_takes(const Tensor& q, const Tensor& v, const Tensor& mask) {
  if (mask.defined() && mask.is_floating_point() && mask.requires_grad()) return false;
  switch (q.device().type) {
    case DeviceType::CPU: return true;
    case DeviceType::CUDA:
      return q.size(-1) <= ops::kCudaAttentionMaxHeadDim && v.size(-1) <= ops::kCudaAttentionMaxHeadDim;
  }
  return false;
}

bool is_16bit(DType dtype) { return dtype == DType::Float16 || dtype == DType::BFloat16; }

}  // namespace

Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const ScaledDotProductAttentionOptions& options) {
  ops::check_attention_inputs(kOp, q, k, v, options.attn_mask, options.dropout_p);
  const DropoutDraw draw = reserve_dropout(q, k, options);
  Tensor p = reference_probabilities(q, k, options.attn_mask, scale_of(q, options), options.is_causal);
  const Tensor factors =
      dropout_factors(p, {.dropout_p = options.dropout_p, .seed = draw.seed, .offset = draw.offset});
  if (factors.defined()) p = kiln::mul(p, factors);
  return kiln::matmul(p, v);
}

Tensor scaled_dot_product_attention_weights(const Tensor& q, const Tensor& k,
                                            const ScaledDotProductAttentionOptions& options) {
  KILN_CHECK(options.dropout_p == 0.0, "scaled_dot_product_attention_weights: the weights are taken without dropout, got dropout_p ", options.dropout_p);
  ops::check_attention_inputs("scaled_dot_product_attention_weights", q, k, k, options.attn_mask, 0.0);
  return reference_probabilities(q, k, options.attn_mask, scale_of(q, options), options.is_causal);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const ScaledDotProductAttentionOptions& options) {
  // As torch's autocast lists it: the products dominate, so 16-bit inputs.
  if (auto c = autograd::autocast_lower_precision(q, k, v)) {
    return scaled_dot_product_attention((*c)[0], (*c)[1], (*c)[2], options);
  }
  const Tensor& mask = options.attn_mask;
  ops::check_attention_inputs(kOp, q, k, v, mask, options.dropout_p);
  if (!fused_kernel_takes(q, v, mask)) return scaled_dot_product_attention_reference(q, k, v, options);
  if (q.device().type == DeviceType::CPU && is_16bit(q.dtype())) {
    // The CPU kernel computes in float32 (as it would for 16-bit inputs).
    // Autocast is off for the float32 call, which it would lower again.
    AutocastGuard float32_inside(DeviceType::CPU, /*enabled=*/false);
    ScaledDotProductAttentionOptions wide = options;
    if (mask.defined() && mask.is_floating_point()) wide.attn_mask = mask.to(DType::Float32);
    return scaled_dot_product_attention(q.to(DType::Float32), k.to(DType::Float32), v.to(DType::Float32), wide)
        .to(q.dtype());
  }
  const DropoutDraw draw = reserve_dropout(q, k, options);
  const AttentionParams params{.scale = scale_of(q, options),
                               .causal = options.is_causal,
                               .dropout_p = options.dropout_p,
                               .seed = draw.seed,
                               .offset = draw.offset};
  ops::AttentionResult r = autograd::untracked([&] { return ops::attention(q, k, v, mask, params); });
  if (!autograd::needs_grad({q, k, v})) return r.out;
  autograd::record_with_outputs(
      kOp, {q, k, v}, {r.out},
      [q = SavedTensor(q), k = SavedTensor(k), v = SavedTensor(v), mask = SavedTensor(mask), lse = r.logsumexp,
       params](const TensorList& g, const TensorList& outs) -> TensorList {
        if (GradMode::is_enabled()) {
          return attention_backward_recorded(g[0], q.get(), k.get(), v.get(), mask.get(), params);
        }
        ops::AttentionGrads grads =
            ops::attention_backward(g[0], q.get(), k.get(), v.get(), mask.get(), {outs[0], lse}, params);
        return {grads.grad_q, grads.grad_k, grads.grad_v};
      });
  return r.out;
}

}  // namespace kiln::nn::functional
