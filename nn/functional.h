// The functional neural-network ops, as torch.nn.functional: activations,
// convolution, pooling, normalization, dropout, embedding and losses. Every
// one is differentiable (Note [Two levels of ops] in autograd/function.h)
// and is what the layers of nn/ call in their forward(). Call them through
// the usual alias:
//
//   namespace F = kiln::nn::functional;
//   Tensor h = F::max_pool2d(F::relu(F::conv2d(x, w, b, /*stride=*/1, /*padding=*/2)), {.kernel = 2});
//   Tensor loss = F::cross_entropy(logits, labels, {.label_smoothing = 0.1});
//
// Names, argument order, defaults and results follow torch.nn.functional;
// where torch takes keyword arguments, Kiln takes an options struct meant
// for designated initializers, as the pooling options of tensor/pool.h.
//
// Note [Backward kernels and double backward]
// conv2d, the pools and the norms run a hand-written backward kernel of the
// tensor layer (tensor/conv.h, pool.h, norm.h), which is much faster than
// composing the backward from elementwise ops. A kernel call would leave
// the gradient without history, so that backward(create_graph=true)
// silently gave wrong second derivatives; each backward is therefore an op
// of its own:
// - conv2d's and the pools' gradients are linear in grad_out, and their
//   adjoints are the forward ops, so their backward nodes differentiate
//   with the forward kernels (nn/functional/conv.cpp, pooling.cpp);
// - batch_norm and layer_norm run the kernel in ordinary training and, when
//   the backward itself is being recorded (grad mode on inside backward,
//   i.e. create_graph), the same formulas written with differentiable ops
//   (nn/functional/normalization.cpp);
// - gelu (autograd/ops/unary.cpp) runs ops::gelu_backward, one pass, in
//   ordinary training and its formula in differentiable ops otherwise.
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/ops.h"
#include "nn/conv_padding.h"
#include "tensor/conv.h"
#include "tensor/pool.h"
#include "tensor/random.h"

namespace kiln::nn::functional {

// ---- activations (nn/functional/activation.cpp) ----
Tensor relu(const Tensor& x);
// x where x > 0, negative_slope * x elsewhere.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// The same written into x and returning it, as torch's relu_ and
// leaky_relu_ (what inplace=true runs); recorded when x requires grad, which
// leaky_relu_ then allows only for negative_slope >= 0, whose sign of the
// output is that of the input (Note [Recorded in-place ops] in
// autograd/function.h).
Tensor& relu_(Tensor& x);
Tensor& leaky_relu_(Tensor& x, double negative_slope = 0.01);
// x where x > 0, alpha * (e^x - 1) elsewhere, as torch's elu; the
// gradient at 0 is alpha (the negative side's, as torch). elu_ writes x and
// returns it, recorded as leaky_relu_ is and allowed under autograd only
// for alpha >= 0, where the output's sign is the input's.
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor& elu_(Tensor& x, double alpha = 1.0);
// x clamped to [min_val, max_val], as torch's hardtanh; the gradient is 1
// strictly between the bounds (and at NaN) and 0 outside and at the bounds
// themselves, as torch's. Floating or integer x; min_val > max_val is an
// error (torch's F.hardtanh clamps everything to max_val then, and
// nn.Hardtanh refuses it). relu6 is hardtanh(x, 0, 6), as torch's. The
// in-place forms write x and return it; under autograd they refuse only
// what every recorded in-place op refuses (Note [Recorded in-place ops]),
// as the output tells which side of each bound the input was on.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor& hardtanh_(Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);
Tensor& relu6_(Tensor& x);
// torch's approximate='none' (the exact erf form) or 'tanh'.
enum class GeluApproximation { None, Tanh };
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Merges dims start_dim..end_dim into one, as torch.flatten (a view when the
// strides allow it, else a copy).
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// x @ weight^T + bias: x (*, in), weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- convolution (nn/functional/conv.cpp) ----
// torch.nn.functional.conv2d: x (N, C, H, W) or (C, H, W), weight
// (OC, C/groups, kh, kw), bias (OC) or undefined -> (N, OC, oh, ow), with
// oh = (H + 2*padding.h - dilation.h*(kh-1) - 1) / stride.h + 1.
// Differentiable in x, weight and bias, to any order. The settings are one
// Conv2dParams (Note [One convolution parameter struct] in tensor/conv.h),
// which nn::Conv2d holds and passes as it is; the second form takes them
// as torch's positional arguments. A braced pair alone after the bias could
// be either (F::conv2d(x, w, b, {2, 1}) does not compile): write
// Size2d(2, 1) or {.stride = {2, 1}}. The positional padding may also be
// kiln::kValid (0) or kiln::kSame (oh = H, ow = W; stride 1 only, Note
// [Same padding] in nn/conv_padding.h).
//   Tensor y = F::conv2d(x, w, b, {.stride = 2, .padding = 1});
//   Tensor z = F::conv2d(x, w, b, /*stride=*/2, /*padding=*/1);   // the same
//   Tensor s = F::conv2d(x, w, b, /*stride=*/1, kiln::kSame);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Size2d stride = 1,
              Conv2dPadding padding = 0, Size2d dilation = 1, int64_t groups = 1);
// torch.nn.functional.conv_transpose2d, conv2d's adjoint (what a DCGAN's
// generator upsamples with): x (N, C_in, H, W) or (C_in, H, W), weight
// (C_in, C_out/groups, kh, kw), bias (C_out) or undefined ->
// (N, C_out, oh, ow) with oh = (H - 1)*stride.h - 2*padding.h +
// dilation.h*(kh - 1) + output_padding.h + 1, and output_padding below
// stride or dilation. p is the Conv2dParams of the conv2d whose adjoint
// this is. Note the positional form's argument order, torch's:
// output_padding and groups before dilation. Differentiable in x, weight
// and bias, to any order.
//   Tensor up = F::conv_transpose2d(z, w, b, /*stride=*/2, /*padding=*/1);  // 4x4 kernel: H -> 2H
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                        Size2d output_padding = 0);
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Size2d stride = 1,
                        Size2d padding = 0, Size2d output_padding = 0, int64_t groups = 1, Size2d dilation = 1);

// ---- pooling (nn/functional/pooling.cpp); options and shapes as tensor/pool.h ----
//   Tensor y = F::max_pool2d(x, {.kernel = 2});
Tensor max_pool2d(const Tensor& x, const kiln::MaxPool2dOptions& options);
// The maxima (differentiable) and their Int64 positions in each (H, W) plane.
PoolResult max_pool2d_with_indices(const Tensor& x, const kiln::MaxPool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const kiln::AvgPool2dOptions& options);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2d output_size);

// ---- normalization (nn/functional/normalization.cpp) ----
// torch.nn.functional.batch_norm: x (N, C, *); running_mean, running_var,
// weight, bias (C), each may be undefined. training: normalise with the batch
// statistics and, when running stats are given, update them in place with
// `momentum` (Note [Normalization statistics] in tensor/norm.h); eval:
// normalise with the running stats, which are then required. Differentiable
// in x, weight and bias.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
// torch.nn.functional.layer_norm: normalises over the trailing dims, which
// must equal normalized_shape; weight and bias have normalized_shape or are
// undefined.
//   Tensor y = F::layer_norm(x, {768}, gamma, beta);   // x: (B, T, 768)
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// ---- dropout (nn/functional/dropout.cpp) ----
// Inverted dropout: in training, each element is zeroed with probability p
// and the rest scaled by 1 / (1 - p), so that eval needs no rescaling; the
// mask is drawn from `gen` (the default generator when null). Returns x
// itself when !training or p == 0, zeros when p == 1. Requires 0 <= p <= 1.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
// The same written into x and returning it (torch's dropout(inplace=True));
// recorded when x requires grad, as relu_ (Note [Recorded in-place ops]).
Tensor& dropout_(Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

// ---- embedding (nn/functional/embedding.cpp) ----
// Rows of weight (num_embeddings, dim) picked by integer indices of any
// shape (*) -> (*, dim). The gradient of weight sums the gradients of the
// rows picked; row padding_idx (negative counts from the end) gets none.
// Indices must lie in [0, num_embeddings).
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

// ---- attention (nn/functional/attention.cpp) ----
struct ScaledDotProductAttentionOptions {
  Tensor attn_mask{};             // Bool (true = take part) or floating (added to the scores), broadcastable to (..., Tq, Tk)
  double dropout_p = 0.0;         // applied only when > 0 (callers pass 0 in eval, as torch)
  bool is_causal = false;         // query i attends keys j <= i (top-left aligned, as torch)
  std::optional<double> scale{};  // default 1/sqrt(D)
  Generator* generator = nullptr; // dropout's generator (default generator when null)
};
// torch.nn.functional.scaled_dot_product_attention:
//   out = dropout(softmax(scale * q k^T + mask)) v
// q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> (..., Tq, Dv); the
// leading dims are usually (B, H) and must be the same for all three. A
// causal and an explicit mask may be combined. Unlike torch, a query row
// that attends to no key (every score masked) gives zeros, not NaN.
// Floating inputs on the CPU and CUDA run the fused kernels (Note [Fused
// attention] in tensor/attention.h: the (Tq, Tk) scores are never stored),
// differentiable in q, k and v to any order (16-bit inputs on the CPU
// compute in float32); a floating attn_mask that requires grad, or head
// dims above 256 on CUDA, take the reference.
//   Tensor y = F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.1, .is_causal = true});
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const ScaledDotProductAttentionOptions& options = {});
// The plain reference through existing differentiable ops,
// softmax(scale * q k^T + mask) v, with the same semantics, the same
// dropout mask for the same generator state, and (Tq, Tk) intermediates.
Tensor scaled_dot_product_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const ScaledDotProductAttentionOptions& options = {});
// The attention probabilities softmax(scale * q k^T + mask), (..., Tq, Tk),
// through differentiable ops, without dropout (options.dropout_p must be 0):
// what MultiheadAttention returns as its weights.
Tensor scaled_dot_product_attention_weights(const Tensor& q, const Tensor& k,
                                            const ScaledDotProductAttentionOptions& options = {});

// ---- losses (nn/functional/loss.cpp, cross_entropy.cpp) ----
// How a loss combines its per-element values: torch's reduction='none' |
// 'mean' | 'sum'.
enum class Reduction { None, Mean, Sum };

// Note [Class-index losses]
// nll_loss and cross_entropy take input (N, C), (C) or (N, C, d1, ...) and
// target class indices (N), () or (N, d1, ...), Int64. For element n with
// class t = target[n], weight w (all ones when undefined):
//   nll_loss:      l_n = -w[t] * input[n, t]
//   cross_entropy: l_n = (1 - s) * (-w[t] * logp[n, t]) + s/C * sum_c (-w[c] * logp[n, c]),
//                  logp = log_softmax(input) over C, s = label_smoothing
// and l_n = 0 where t == ignore_index. Mean divides the sum of l_n by the
// sum of w[t] over the elements not ignored (the count when unweighted), so
// a batch whose targets are all ignored gives NaN, exactly as torch. A
// target outside [0, C) that is not ignore_index is an error. The weight
// receives no gradient (torch has none either).

struct NLLLossOptions {
  Tensor weight{};  // (C) or undefined
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};
// input holds log-probabilities (the output of log_softmax).
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});

struct CrossEntropyOptions {
  Tensor weight{};  // (C) or undefined
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;  // in [0, 1]
};
// input holds unnormalised logits. For class indices the op is one node
// whose forward and backward are each one fused pass over the rows
// (ops::cross_entropy_rows, Note [Fused cross entropy]): the backward
// computes softmax(input) - (smoothed) one-hot from the saved logits,
// rather than a chain of log_softmax, gather and reduction nodes. Target may also hold class
// probabilities, a floating tensor of input's shape (torch's soft labels):
// l_n = -sum_c w[c] * y[n, c] * logp[n, c] with y smoothed as
// (1 - s) * y + s/C; mean then divides by the number of elements N * d1 * ...
//   Tensor loss = F::cross_entropy(logits, labels, {.ignore_index = 0, .label_smoothing = 0.1});
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});

// (input - target)^2 and |input - target|, elementwise. input and target must
// have the same shape (torch broadcasts them with a warning, which is almost
// always a bug such as (N, 1) against (N)); both are differentiable.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

struct BCEWithLogitsOptions {
  Tensor weight{};      // broadcasts to input's shape, or undefined
  Tensor pos_weight{};  // weight of the positive term, broadcasts along the last dim (C), or undefined
  Reduction reduction = Reduction::Mean;
};
// Binary cross entropy on logits x with targets y in [0, 1], as torch:
//   l = weight * ((1 - y) * x + (1 + (pos_weight - 1) * y) * log(1 + exp(-x)))
// with log(1 + exp(-x)) evaluated without overflow for any x. input and
// target have the same shape; both are differentiable.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options = {});

}  // namespace kiln::nn::functional
