// Fused scaled dot-product attention: the raw, gradient-free forward and
// backward kernels' front-end (nn::functional::scaled_dot_product_attention
// wraps them with autograd), and the dropout mask both devices draw.
//
// Note [Fused attention]
// Attention is out = softmax(scale * Q K^T + mask) V for each (batch, head):
// q (Tq, D), k (Tk, D), v (Tk, Dv). Written as tensor ops it materialises
// the scores and the probabilities, (Tq, Tk) each, and keeps them for the
// backward: for T = 1024 that is 4 MB per head in float32, more than the
// activations around it. The fused kernels never hold more than a block:
// - Forward (FlashAttention-2, Dao 2023). The queries are cut into blocks
//   of Bq rows and the keys into blocks of Bk. For one query block, the
//   kernel walks the key blocks keeping per row a running max m, a running
//   sum l of exp(s - m) and an unnormalised output o (Bq, Dv). A new block
//   of scores s = scale * q k_blk^T + mask raises the max to m', and the old
//   sum and output are rescaled by exp(m - m') before the block's
//   exp(s - m') is added ("online softmax"). After the last block,
//   out = o / l, and the row's logsumexp m + log(l) is saved: (B, H, Tq),
//   all the backward needs to rebuild any probability p = exp(s - lse).
//   Memory: O(Bq * Bk + Bq * Dv) per thread beyond q, k, v and out.
// - Backward. With P the probabilities and dO the incoming gradient,
//   D_i = rowsum(dO * O) (= sum_j P_ij dP_ij), and per block pair
//     dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),
//     dQ += scale * dS K,  dK += scale * dS^T Q,
//   each block of P recomputed from the saved logsumexp rather than stored.
// - Causal (is_causal): query i attends keys j <= i (torch's top-left
//   alignment; for Tq != Tk that is *not* the bottom-right alignment a KV
//   cache wants: a cached decoder passes is_causal only when Tq == Tk).
//   Blocks wholly above the diagonal are skipped, which halves the work.
// - Masks: a Bool mask keeps the scores where it is true (false: -inf); a
//   floating mask is added to the scores. Either may broadcast (stride 0)
//   over any of (B, H, Tq, Tk). A row that attends to nothing (every score
//   -inf) gives zeros and zero gradients; torch gives NaN, which poisons a
//   padded batch's loss, while a zero row is what the padding means.
// - Dropout on the probabilities (torch's dropout_p): element (b, h, i, j)
//   of the (B, H, Tq, Tk) probability tensor, numbered e in row-major order,
//   is kept when 16 bits of Philox block offset + e / 8 (its e % 8-th
//   half-word) are at least a threshold (attention_dropout_keep below), and
//   scaled by 1 / (1 - p'), p' = threshold / 65536 the probability actually
//   dropped, so the expectation is exactly the undropped one. The key is
//   the element, not the thread or the block, so the forward and the
//   backward regenerate the same mask, and the CPU and CUDA kernels and the
//   reference (attention_dropout_mask) all drop the same elements.
// - Precision: the CPU kernel computes float32 inputs in float32 (its GEMMs
//   accumulate in float32; the softmax sums too) and float64 in float64.
//   The logsumexp is float32 for 16-bit and float32 inputs, float64 for
//   float64.
//
// Note [Attention layouts]
// A GPT's attention takes its heads from one projection: c_attn's (B, T, 3E)
// output split into q, k and v, each viewed as (B, T, H, D) and transposed
// to (B, H, T, D); its output goes back the same way, (B, H, T, Dv) to
// (B, T, H * Dv), into c_proj. Were the kernels to want contiguous
// (B, H, T, D) tensors, each of those steps would copy, forward and
// backward. Instead:
// - The kernels read q, k, v, out and grad_out and write out, grad_q,
//   grad_k and grad_v through their (B, H, T) strides; only the last dim
//   must be contiguous (a row of a head is one run of memory, what the block
//   products and the warps' loads want). The front-end below copies only an
//   input whose last dim is not, and views the leading dims as (B, H)
//   without copying whenever their strides allow (a KV cache's
//   (B, H, block_size, D) buffer narrowed to its first Tk keys qualifies).
// - Outputs are allocated in their input's memory order: out in q's, each
//   gradient in its input's, (B, H, T) ordered by the input's strides with
//   the last dim innermost. For transposed heads that is (B, T, H, D)
//   memory, so that `out.transpose(1, 2).reshape({B, T, H * Dv})` is a view
//   and the gradients, transposed back, are contiguous (B, T, H, D) tensors;
//   for contiguous inputs everything stays contiguous, as before.
#pragma once

#include <cstdint>

#include "tensor/backend.h"
#include "tensor/host_device.h"
#include "tensor/philox.h"
#include "tensor/tensor.h"

namespace kiln::ops {

// ---- dropout on the probabilities (Note [Fused attention]) ----

// The 16-bit threshold for dropping with probability p in [0, 1]:
// round(p * 65536); 65536 drops everything.
uint32_t attention_dropout_threshold(double p);
// The factor a kept probability is multiplied by: 65536 / (65536 - threshold),
// 0 when everything is dropped.
double attention_dropout_scale(uint32_t threshold);
// Philox counter blocks one call consumes for `elements` probabilities
// (B * H * Tq * Tk): eight per block.
inline uint64_t attention_dropout_blocks(int64_t elements) { return (static_cast<uint64_t>(elements) + 7) / 8; }

// Whether probability number `e` (row-major over (B, H, Tq, Tk)) is kept.
KILN_HOST_DEVICE inline bool attention_dropout_keep(uint64_t seed, uint64_t offset, uint64_t e, uint32_t threshold) {
  const philox::Block block = philox::element_block(seed, offset, e / 8);
  const uint32_t word = block.w[(e % 8) / 2];
  const uint32_t half = (e % 2 == 0) ? (word & 0xFFFFu) : (word >> 16);
  return half >= threshold;
}

// The dropout factors of a whole (..., Tq, Tk) probability tensor: 0 where
// dropped, attention_dropout_scale where kept, in `options`' dtype and
// device. The materialised twin of what the fused kernels compute inline;
// the reference multiplies its probabilities by it.
Tensor attention_dropout_mask(const Shape& shape, double p, uint64_t seed, uint64_t offset,
                              TensorOptions options);

// ---- the fused kernels ----

// The CUDA kernels keep a row's accumulators in registers: head dims (D and
// Dv) up to this; nn::functional takes the reference beyond it.
inline constexpr int64_t kCudaAttentionMaxHeadDim = 256;

// Checks what both the fused and the reference attention require, naming
// `op` in the error: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) with the
// same leading dims (at least one dim of T and one of D each), defined, of
// one floating dtype and on one device; mask undefined, or Bool or floating,
// on q's device and broadcastable to (..., Tq, Tk); dropout_p in [0, 1].
void check_attention_inputs(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& mask, double dropout_p);

struct AttentionResult {
  Tensor out;        // (..., Tq, Dv), q's dtype, laid out in q's memory order (Note [Attention layouts])
  Tensor logsumexp;  // (..., Tq), contiguous: float64 for float64 inputs, else float32
};

// The fused forward (Note [Fused attention]) on q's device: inputs as
// check_attention_inputs, any strides (an input whose last dim is not
// contiguous is copied; Note [Attention layouts]); a floating mask is converted to q's dtype. The
// dropout mask, when params.dropout_p > 0, is keyed by params.seed and
// params.offset (the caller reserves attention_dropout_blocks counter blocks).
//   AttentionResult r = ops::attention(q, k, v, Tensor(), {.scale = 0.125, .causal = true});
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const AttentionParams& params);

struct AttentionGrads {
  Tensor grad_q, grad_k, grad_v;  // q's, k's and v's shapes, each in its input's memory order
};

// The gradients of attention() for grad_out (..., Tq, Dv), given the
// forward's inputs, params and result.
AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, const AttentionResult& forward, const AttentionParams& params);

}  // namespace kiln::ops
