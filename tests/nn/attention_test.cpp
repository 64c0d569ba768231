// scaled_dot_product_attention: the reference against float64 loops, the
// fused kernels against the reference (forward and backward, float64, odd
// sizes, every mask), gradcheck, dropout, errors, and CPU against CUDA.
#include <cmath>
#include <limits>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/autograd_test_util.h"
#include "nn/functional.h"
#include "tensor/attention.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::gradtest {
namespace {

namespace F = kiln::nn::functional;
constexpr double kInf = std::numeric_limits<double>::infinity();

// What the float64 loop below takes: q (N, Tq, D), k (N, Tk, D), v (N, Tk, Dv)
// and an additive mask broadcast to (N, Tq, Tk) (-inf where not attended),
// dropout factors (N, Tq, Tk) or empty.
struct LoopCase {
  std::vector<double> q, k, v, mask, dropout;
  int64_t n, tq, tk, d, dv;
  double scale;
  bool causal;
};

// out (N, Tq, Dv): softmax over each row, computed row by row in float64;
// a row with no finite score gives zeros.
std::vector<double> loop_attention(const LoopCase& c) {
  std::vector<double> out(static_cast<size_t>(c.n * c.tq * c.dv), 0.0);
  for (int64_t b = 0; b < c.n; ++b) {
    for (int64_t i = 0; i < c.tq; ++i) {
      std::vector<double> s(static_cast<size_t>(c.tk));
      double max = -kInf;
      for (int64_t j = 0; j < c.tk; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < c.d; ++x) dot += c.q[(b * c.tq + i) * c.d + x] * c.k[(b * c.tk + j) * c.d + x];
        s[j] = dot * c.scale;
        if (!c.mask.empty()) s[j] += c.mask[(b * c.tq + i) * c.tk + j];
        if (c.causal && j > i) s[j] = -kInf;
        max = std::max(max, s[j]);
      }
      if (max == -kInf) continue;
      double sum = 0;
      for (int64_t j = 0; j < c.tk; ++j) sum += std::exp(s[j] - max);
      for (int64_t j = 0; j < c.tk; ++j) {
        double p = std::exp(s[j] - max) / sum;
        if (!c.dropout.empty()) p *= c.dropout[(b * c.tq + i) * c.tk + j];
        for (int64_t x = 0; x < c.dv; ++x) out[(b * c.tq + i) * c.dv + x] += p * c.v[(b * c.tk + j) * c.dv + x];
      }
    }
  }
  return out;
}

// A LoopCase from (..., T, D) tensors; `mask` (any broadcastable shape,
// Bool or floating) is expanded to (..., Tq, Tk).
LoopCase loop_case(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, bool causal) {
  LoopCase c{values(q), values(k), values(v), {}, {}, 0, q.size(-2), k.size(-2), q.size(-1), v.size(-1), scale,
             causal};
  c.n = q.numel() / std::max<int64_t>(1, c.tq * c.d);
  if (q.numel() == 0) c.n = 1;
  if (mask.defined()) {
    Shape scores(q.shape().begin(), q.shape().end() - 1);
    scores.push_back(c.tk);
    Tensor m = mask.expand(scores).contiguous();
    if (m.dtype() == DType::Bool) m = ops::where(m, zeros(m.shape(), DType::Float64), -kInf);  // true attends
    c.mask = values(m);
  }
  return c;
}

TEST(AttentionReference, MatchesLoopsWithoutMask) {
  Tensor q = uniform64({2, 3, 5, 4}, 1), k = uniform64({2, 3, 7, 4}, 2), v = uniform64({2, 3, 7, 6}, 3);
  Tensor out = F::scaled_dot_product_attention_reference(q, k, v);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5, 6}));
  expect_values(out, loop_attention(loop_case(q, k, v, Tensor(), 0.5, false)), 1e-12);
}

TEST(AttentionReference, MatchesLoopsWithCausalBoolAndFloatMasks) {
  Tensor q = uniform64({2, 6, 3}, 4, -2, 2), k = uniform64({2, 6, 3}, 5, -2, 2), v = uniform64({2, 6, 2}, 6);
  // Bool (Tq, Tk), broadcast over the batch.
  Tensor keep = ops::gt(uniform64({6, 6}, 7), -0.3);
  Tensor out = F::scaled_dot_product_attention_reference(q, k, v, {.attn_mask = keep, .is_causal = true, .scale = 0.7});
  expect_values(out, loop_attention(loop_case(q, k, v, keep, 0.7, true)), 1e-12);
  // Floating (N, 1, Tk): a padding mask added to the scores.
  Tensor add = uniform64({2, 1, 6}, 8, -3, 1);
  out = F::scaled_dot_product_attention_reference(q, k, v, {.attn_mask = add});
  expect_values(out, loop_attention(loop_case(q, k, v, add, 1 / std::sqrt(3.0), false)), 1e-12);
}

TEST(AttentionReference, FullyMaskedRowsGiveZerosAndZeroGradients) {
  Tensor q = leaf({1, 4, 3}, 9), k = leaf({1, 5, 3}, 10), v = leaf({1, 5, 2}, 11);
  // Row 2 attends to nothing.
  Tensor keep = from_vector<bool>({1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, {4, 5});
  Tensor out = F::scaled_dot_product_attention_reference(q, k, v, {.attn_mask = keep});
  std::vector<double> got = values(out);
  EXPECT_EQ(got[4], 0.0);
  EXPECT_EQ(got[5], 0.0);
  expect_values(out, loop_attention(loop_case(q, k, v, keep, 1 / std::sqrt(3.0), false)), 1e-12);
  kiln::sum(out).backward();
  for (double g : values(q.grad())) EXPECT_TRUE(std::isfinite(g));
  EXPECT_EQ(values(q.grad())[6], 0.0);  // row 2 of q
}

TEST(AttentionReference, DropoutUsesTheSharedMaskAndScaling) {
  Tensor q = uniform64({2, 2, 9, 4}, 12), k = uniform64({2, 2, 9, 4}, 13), v = uniform64({2, 2, 9, 5}, 14);
  Generator gen(77);
  Tensor out = F::scaled_dot_product_attention_reference(q, k, v, {.dropout_p = 0.25, .generator = &gen});
  // The same draw again: the mask of the first 2*2*9*9 probabilities.
  EXPECT_EQ(gen.offset(), ops::attention_dropout_blocks(2 * 2 * 9 * 9));
  Tensor mask = ops::attention_dropout_mask({2, 2, 9, 9}, 0.25, 77, 0, DType::Float64);
  LoopCase c = loop_case(q, k, v, Tensor(), 0.5, false);
  c.dropout = values(mask);
  expect_values(out, loop_attention(c), 1e-12);
  // Every factor is 0 or 1 / (1 - 0.25), and about a quarter are 0.
  int64_t dropped = 0;
  for (double m : c.dropout) {
    EXPECT_TRUE(m == 0.0 || std::abs(m - 4.0 / 3.0) < 1e-15) << m;
    dropped += m == 0.0;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(c.dropout.size()), 0.25, 0.06);
}

TEST(AttentionReference, Gradcheck) {
  Tensor q = leaf({2, 4, 3}, 15), k = leaf({2, 5, 3}, 16), v = leaf({2, 5, 2}, 17);
  Tensor keep = ops::gt(uniform64({4, 5}, 18), -0.5);
  expect_gradcheck(
      [&](const TensorList& in) {
        return TensorList{F::scaled_dot_product_attention_reference(in[0], in[1], in[2], {.attn_mask = keep})};
      },
      {q, k, v});
}


// ---- the fused kernels against the reference ----

// Runs attention and its backward for gradient `g` through fn, returning
// {out, grad_q, grad_k, grad_v}.
TensorList forward_backward(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& fn,
                            const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g) {
  Tensor qq = q.detach().requires_grad_(), kk = k.detach().requires_grad_(), vv = v.detach().requires_grad_();
  Tensor out = fn(qq, kk, vv);
  out.backward(g);
  return {out.detach(), qq.grad(), kk.grad(), vv.grad()};
}

// Expects the fused op to match the reference in float64, forward and
// backward for gradient g, on q, k and v as they are laid out (any strides);
// returns the fused {out, grad_q, grad_k, grad_v}.
TensorList expect_fused_matches_reference_on(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                             const F::ScaledDotProductAttentionOptions& options, uint64_t seed,
                                             double tol = 1e-11) {
  // Each path draws its dropout mask from a generator in the same state.
  auto run = [&](bool fused) {
    Generator gen(seed + 4);
    F::ScaledDotProductAttentionOptions o = options;
    o.generator = &gen;
    return forward_backward(
        [&](const Tensor& a, const Tensor& b, const Tensor& c) {
          return fused ? F::scaled_dot_product_attention(a, b, c, o) : F::scaled_dot_product_attention_reference(a, b, c, o);
        },
        q, k, v, g);
  };
  TensorList fused = run(true), reference = run(false);
  const char* names[] = {"out", "grad_q", "grad_k", "grad_v"};
  for (int t = 0; t < 4; ++t) {
    SCOPED_TRACE(std::string(names[t]) + " for q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " +
                 shape_str(v.shape()));
    EXPECT_EQ(fused[t].shape(), reference[t].shape());
    expect_values(fused[t], values(reference[t]), tol);
  }
  return fused;
}

// The same on fresh contiguous inputs: q of q_shape, Tk keys, value dim Dv.
void expect_fused_matches_reference(const Shape& q_shape, int64_t tk, int64_t dv,
                                    const F::ScaledDotProductAttentionOptions& options, uint64_t seed,
                                    double tol = 1e-11) {
  Shape k_shape = q_shape, v_shape = q_shape, out_shape = q_shape;
  k_shape[k_shape.size() - 2] = tk;
  v_shape[v_shape.size() - 2] = tk;
  v_shape.back() = dv;
  out_shape.back() = dv;
  Tensor q = uniform64(q_shape, seed, -2, 2), k = uniform64(k_shape, seed + 1, -2, 2), v = uniform64(v_shape, seed + 2);
  expect_fused_matches_reference_on(q, k, v, uniform64(out_shape, seed + 3), options, seed, tol);
}

TEST(AttentionFused, MatchesReferenceForOddSizes) {
  uint64_t seed = 100;
  for (int64_t t : {1, 7, 33, 130}) {
    for (int64_t d : {3, 17, 64}) {
      for (bool causal : {false, true}) {
        expect_fused_matches_reference({2, 2, t, d}, t, d, {.is_causal = causal}, seed += 10);
      }
    }
  }
}

TEST(AttentionFused, MatchesReferenceWhenQueriesAndKeysDiffer) {
  expect_fused_matches_reference({2, 3, 5, 8}, 70, 11, {}, 200);
  expect_fused_matches_reference({2, 3, 70, 8}, 5, 11, {}, 210);
  expect_fused_matches_reference({1, 2, 5, 8}, 70, 3, {.is_causal = true}, 220);
  expect_fused_matches_reference({1, 2, 70, 8}, 5, 3, {.is_causal = true}, 230);
  expect_fused_matches_reference({3, 9, 4}, 130, 4, {.scale = 0.3}, 240);  // one leading dim
  expect_fused_matches_reference({9, 4}, 13, 6, {}, 250);                  // none
}

TEST(AttentionFused, MatchesReferenceWithMasks) {
  // Bool (B, 1, Tq, Tk), broadcast over the heads, with fully masked rows.
  Tensor keep = ops::gt(uniform64({2, 1, 67, 70}, 300), -0.2);
  keep.narrow(2, 3, 2).copy_(zeros({2, 1, 2, 70}, DType::Bool));
  expect_fused_matches_reference({2, 3, 67, 9}, 70, 5, {.attn_mask = keep}, 310);
  expect_fused_matches_reference({2, 3, 67, 9}, 70, 5, {.attn_mask = keep, .is_causal = true}, 320);
  // Floating (Tq, Tk), broadcast over batch and heads, with -inf entries.
  Tensor add = ops::where(ops::gt(uniform64({67, 70}, 330), 0.8), full({67, 70}, -kInf, DType::Float64), uniform64({67, 70}, 331, -2, 2));
  expect_fused_matches_reference({2, 3, 67, 9}, 70, 5, {.attn_mask = add}, 340);
  // A key padding mask (B, 1, 1, Tk): stride 0 along the queries.
  Tensor padding = ops::lt(arange(70, DType::Int64).view({1, 1, 1, 70}), from_vector<int64_t>({70, 41}, {2, 1, 1, 1}));
  expect_fused_matches_reference({2, 3, 67, 9}, 70, 5, {.attn_mask = padding, .is_causal = true}, 350);
  // A mask over a non-contiguous view.
  Tensor transposed = ops::gt(uniform64({70, 67}, 360), -0.5).t();
  expect_fused_matches_reference({1, 2, 67, 9}, 70, 5, {.attn_mask = transposed}, 370);
}

// ---- strided inputs (Note [Attention layouts]) ----

// q, k, v (B, H, T, D) as a GPT takes them: the thirds of one (B, T, 3HD)
// projection, each viewed as (B, T, H, D) and transposed.
TensorList projection_heads(const Tensor& qkv, int64_t heads) {
  const int64_t b = qkv.size(0), t = qkv.size(1), e = qkv.size(2) / 3;
  TensorList out;
  for (int64_t i = 0; i < 3; ++i) out.push_back(qkv.narrow(2, i * e, e).view({b, t, heads, e / heads}).transpose(1, 2));
  return out;
}

// Whether t (B, H, T, X) is laid out as a contiguous (B, T, H, X) tensor.
bool in_projection_order(const Tensor& t) { return t.transpose(1, 2).is_contiguous(); }

TEST(AttentionFused, MatchesReferenceOnTheHeadsOfOneProjection) {
  for (bool causal : {false, true}) {
    TensorList qkv = projection_heads(uniform64({2, 37, 3 * 3 * 5}, 380, -2, 2), 3);  // 3 x (2, 3, 37, 5)
    ASSERT_FALSE(qkv[0].is_contiguous());
    Tensor g = uniform64({2, 37, 3, 5}, 381).transpose(1, 2);  // as c_proj's gradient arrives, viewed as heads
    TensorList fused = expect_fused_matches_reference_on(qkv[0], qkv[1], qkv[2], g, {.is_causal = causal}, 382);
    // The output comes back in the projection's order: merging the heads is a view.
    EXPECT_TRUE(in_projection_order(fused[0]));
  }
}

TEST(AttentionFused, MatchesReferenceOnSlicedInputs) {
  // q: rows 3..35 of a longer sequence; k: 9 of every 13 columns (row
  // stride 13, offset 2); v: transposed heads; the gradient strided too.
  Tensor q = uniform64({2, 3, 40, 9}, 390, -2, 2).narrow(2, 3, 33);
  Tensor k = uniform64({2, 3, 50, 13}, 391, -2, 2).narrow(3, 2, 9);
  Tensor v = uniform64({2, 50, 3, 7}, 392).transpose(1, 2);
  Tensor g = uniform64({2, 3, 33, 10}, 393).narrow(3, 1, 7);
  expect_fused_matches_reference_on(q, k, v, g, {}, 394);
  expect_fused_matches_reference_on(q, k, v, g, {.is_causal = true}, 395);
  // A last dim that is not contiguous is copied first.
  Tensor q_columns = uniform64({2, 3, 9, 33}, 396, -2, 2).transpose(2, 3);
  Tensor keep = ops::gt(uniform64({2, 1, 33, 50}, 397), -0.5);
  expect_fused_matches_reference_on(q_columns, k, v, g, {.attn_mask = keep, .dropout_p = 0.2}, 398);
}

TEST(AttentionFused, MatchesReferenceOnACacheLikeSliceOfALargerBuffer) {
  // A KV cache: (B, H, block_size, D) buffers holding the first 21 keys.
  Tensor keys = uniform64({2, 3, 64, 8}, 410, -2, 2), values_buffer = uniform64({2, 3, 64, 6}, 411);
  Tensor k = keys.narrow(2, 0, 21), v = values_buffer.narrow(2, 0, 21);
  // A prefill: the 21 tokens' own queries, causal.
  Tensor q = uniform64({2, 21, 3, 8}, 412, -2, 2).transpose(1, 2);
  Tensor g = uniform64({2, 21, 3, 6}, 413).transpose(1, 2);
  expect_fused_matches_reference_on(q, k, v, g, {.is_causal = true}, 414);
  // One new token attending everything cached.
  Tensor q1 = uniform64({2, 1, 3, 8}, 415, -2, 2).transpose(1, 2);
  TensorList fused = expect_fused_matches_reference_on(q1, k, v, uniform64({2, 3, 1, 6}, 416), {}, 417);
  EXPECT_TRUE(in_projection_order(fused[0]));
}

TEST(AttentionFused, MatchesReferenceWithLeadingDimsThatMergeAndThatDoNot) {
  // (2, 3, H, T, D) heads transposed out of (2, 3, T, H, D): the first two
  // dims merge into the kernels' B without a copy, and the output keeps the
  // (2, 3, T, H, D) order.
  Tensor q = uniform64({2, 3, 11, 4, 5}, 420, -2, 2).transpose(2, 3);
  Tensor k = uniform64({2, 3, 13, 4, 5}, 421, -2, 2).transpose(2, 3);
  Tensor v = uniform64({2, 3, 13, 4, 6}, 422).transpose(2, 3);
  TensorList fused = expect_fused_matches_reference_on(q, k, v, uniform64({2, 3, 4, 11, 6}, 423), {.is_causal = true}, 424);
  EXPECT_TRUE(fused[0].transpose(2, 3).is_contiguous());
  // (2, 3, H, T, D) out of (2, T, 3, H, D): the batch dims do not merge by
  // strides, so the inputs are copied; the results are the same.
  Tensor q2 = uniform64({2, 11, 3, 4, 5}, 425, -2, 2).permute({0, 2, 3, 1, 4});
  Tensor k2 = uniform64({2, 13, 3, 4, 5}, 426, -2, 2).permute({0, 2, 3, 1, 4});
  expect_fused_matches_reference_on(q2, k2, v, uniform64({2, 3, 4, 11, 6}, 427), {}, 428);
}

TEST(AttentionFused, ResultsFollowTheirInputsMemoryOrder) {
  // (Leaf gradients are made contiguous when accumulated, so the layouts are
  // checked on the front-end's results.)
  const AttentionParams params{.scale = 0.5, .causal = true};
  auto run = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    ops::AttentionResult r = ops::attention(q, k, v, Tensor(), params);
    ops::AttentionGrads g = ops::attention_backward(uniform64(r.out.shape(), 435), q, k, v, Tensor(), r, params);
    return TensorList{r.out, g.grad_q, g.grad_k, g.grad_v};
  };
  // The heads of one projection: everything in (B, T, H, X) order, so that
  // merging the heads forward and joining their gradients backward copy nothing.
  TensorList heads = projection_heads(uniform64({2, 9, 3 * 3 * 4}, 436), 3);
  for (const Tensor& t : run(heads[0], heads[1], heads[2])) EXPECT_TRUE(in_projection_order(t)) << shape_str(t.strides());
  // Contiguous inputs: contiguous results.
  Tensor q = uniform64({2, 3, 9, 4}, 437), k = uniform64({2, 3, 10, 4}, 438), v = uniform64({2, 3, 10, 5}, 439);
  for (const Tensor& t : run(q, k, v)) EXPECT_TRUE(t.is_contiguous()) << shape_str(t.strides());
  // Mixed: each gradient follows its own input, the output follows q.
  TensorList mixed = run(q, uniform64({2, 10, 3, 4}, 440).transpose(1, 2), v);
  EXPECT_TRUE(mixed[0].is_contiguous());
  EXPECT_TRUE(mixed[1].is_contiguous());
  EXPECT_TRUE(in_projection_order(mixed[2]));
  EXPECT_TRUE(mixed[3].is_contiguous());
}

TEST(AttentionFused, TheGptChainMatchesReference) {
  // c_attn's output (B, T, 3E) -> heads -> attention -> heads side by side
  // (B, T, E), forward and backward, fused against reference.
  auto chain = [](const Tensor& qkv, bool fused) {
    TensorList h = projection_heads(qkv, 4);  // autograd views
    Tensor y = fused ? F::scaled_dot_product_attention(h[0], h[1], h[2], {.is_causal = true})
                     : F::scaled_dot_product_attention_reference(h[0], h[1], h[2], {.is_causal = true});
    return y.transpose(1, 2).reshape({qkv.size(0), qkv.size(1), qkv.size(2) / 3});
  };
  Tensor base = uniform64({3, 70, 3 * 4 * 6}, 440, -2, 2), w = uniform64({3, 70, 4 * 6}, 441);
  Tensor a = base.detach().requires_grad_(), b = base.detach().requires_grad_();
  Tensor fused = chain(a, true), reference = chain(b, false);
  expect_values(fused, values(reference), 1e-11);
  kiln::sum(kiln::mul(fused, w)).backward();
  kiln::sum(kiln::mul(reference, w)).backward();
  expect_values(a.grad(), values(b.grad()), 1e-11);
}

TEST(AttentionFused, KernelsRequireContiguousRows) {
  Tensor q = uniform64({1, 1, 3, 4}, 450).transpose(2, 3), k = uniform64({1, 1, 5, 3}, 451), v = uniform64({1, 1, 5, 2}, 452);
  Tensor out = empty({1, 1, 4, 2}, DType::Float64), lse = empty({1, 1, 4}, DType::Float64);
  expect_error([&] { backend_for(kCPU).attention(out, lse, q, k, v, Tensor(), {.scale = 1.0}); },
               "attention: expected (B, H, T, X) tensors with their last dim contiguous, got shape [1, 1, 4, 3] and "
               "strides [12, 12, 1, 4]");
  Tensor grads[3] = {empty({1, 1, 4, 3}, DType::Float64), empty({1, 1, 5, 3}, DType::Float64),
                     empty({1, 1, 5, 2}, DType::Float64)};
  Tensor strided_grad = empty({1, 1, 2, 4}, DType::Float64).transpose(2, 3);
  Tensor q_rows = uniform64({1, 1, 4, 3}, 453);
  expect_error([&] { backend_for(kCPU).attention_backward(grads[0], grads[1], grads[2], strided_grad, q_rows, k, v, out, lse, Tensor(), {}); },
               "attention_backward: expected (B, H, T, X) tensors with their last dim contiguous, got shape [1, 1, 4, 2]");
}

TEST(AttentionFused, FullyMaskedRowsGiveZeros) {
  Tensor q = uniform64({1, 1, 4, 3}, 400), k = uniform64({1, 1, 6, 3}, 401), v = uniform64({1, 1, 6, 2}, 402);
  Tensor keep = ones({4, 6}, DType::Bool);
  Tensor row = keep.select(0, 2);
  ops::fill_(row, false);
  ops::AttentionResult r = ops::attention(q, k, v, keep, {.scale = 0.5});
  std::vector<double> out = values(r.out);
  EXPECT_EQ(out[4], 0.0);
  EXPECT_EQ(out[5], 0.0);
  EXPECT_EQ(values(r.logsumexp)[2], -kInf);
  ops::AttentionGrads g = ops::attention_backward(ones({1, 1, 4, 2}, DType::Float64), q, k, v, keep, r, {.scale = 0.5});
  for (Tensor t : {g.grad_q, g.grad_k, g.grad_v}) {
    for (double x : values(t)) EXPECT_TRUE(std::isfinite(x));
  }
  EXPECT_EQ(values(g.grad_q)[6], 0.0);
  // No keys at all: zeros, and zero gradients.
  Tensor none = uniform64({1, 1, 0, 3}, 403);
  Tensor out0 = F::scaled_dot_product_attention(q, none, uniform64({1, 1, 0, 2}, 404));
  expect_values(out0, std::vector<double>(8, 0.0));
}

TEST(AttentionFused, DropoutMatchesReferenceAndIsReproducible) {
  expect_fused_matches_reference({2, 3, 33, 8}, 33, 8, {.dropout_p = 0.3}, 500);
  expect_fused_matches_reference({2, 3, 33, 8}, 70, 8, {.dropout_p = 0.3, .is_causal = true}, 510);
  Tensor keep = ops::gt(uniform64({33, 70}, 520), -0.4);
  expect_fused_matches_reference({2, 3, 33, 8}, 70, 5, {.attn_mask = keep, .dropout_p = 0.5}, 530);
  Tensor q = uniform64({2, 2, 40, 8}, 540), k = uniform64({2, 2, 40, 8}, 541), v = uniform64({2, 2, 40, 8}, 542);
  Generator a(9), b(9), c(10);
  Tensor first = F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.2, .generator = &a});
  Tensor again = F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.2, .generator = &b});
  Tensor other = F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.2, .generator = &c});
  Tensor next = F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.2, .generator = &a});
  expect_values(again, values(first), 0.0);
  EXPECT_GT(values(ops::amax(ops::abs(ops::sub(first, other)))).at(0), 1e-3);
  EXPECT_GT(values(ops::amax(ops::abs(ops::sub(first, next)))).at(0), 1e-3);  // the generator moved on
  // p = 1 drops everything.
  expect_values(F::scaled_dot_product_attention(q, k, v, {.dropout_p = 1.0}), std::vector<double>(q.numel(), 0.0));
}

TEST(AttentionFused, DropoutKeepsTheExpectation) {
  // Averaged over many masks, dropout's output is the undropped one.
  Tensor q = uniform64({1, 1, 6, 4}, 600), k = uniform64({1, 1, 6, 4}, 601), v = uniform64({1, 1, 6, 4}, 602);
  Tensor plain = F::scaled_dot_product_attention(q, k, v);
  Generator gen(3);
  Tensor sum = zeros({1, 1, 6, 4}, DType::Float64);
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) sum = ops::add(sum, F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.4, .generator = &gen}));
  expect_values(ops::div(sum, static_cast<double>(draws)), values(plain), 0.03);
}

TEST(AttentionFused, Gradcheck) {
  Tensor q = leaf({2, 2, 5, 3}, 700), k = leaf({2, 2, 7, 3}, 701), v = leaf({2, 2, 7, 4}, 702);
  Tensor keep = ops::gt(uniform64({2, 1, 5, 7}, 703), -0.6);
  Tensor add = uniform64({5, 7}, 704);
  for (const F::ScaledDotProductAttentionOptions& o :
       {F::ScaledDotProductAttentionOptions{}, F::ScaledDotProductAttentionOptions{.is_causal = true},
        F::ScaledDotProductAttentionOptions{.attn_mask = keep, .scale = 0.8},
        F::ScaledDotProductAttentionOptions{.attn_mask = add, .is_causal = true}}) {
    expect_gradcheck([&](const TensorList& in) { return TensorList{F::scaled_dot_product_attention(in[0], in[1], in[2], o)}; },
                     {q, k, v});
  }
  // With dropout, each evaluation draws the same mask from a fresh generator.
  expect_gradcheck(
      [&](const TensorList& in) {
        Generator gen(5);
        return TensorList{F::scaled_dot_product_attention(in[0], in[1], in[2], {.dropout_p = 0.3, .generator = &gen})};
      },
      {q, k, v});
}

TEST(AttentionFused, SecondDerivativesThroughTheRecordedBackward) {
  Tensor q = leaf({1, 2, 4, 3}, 800), k = leaf({1, 2, 5, 3}, 801), v = leaf({1, 2, 5, 2}, 802);
  expect_gradgradcheck(
      [&](const TensorList& in) {
        Generator gen(6);
        return TensorList{
            F::scaled_dot_product_attention(in[0], in[1], in[2], {.dropout_p = 0.2, .is_causal = true, .generator = &gen})};
      },
      {q, k, v});
}

TEST(AttentionFused, Float32MatchesFloat64Reference) {
  // float32 throughout (products and softmax sums): within 2e-5 of float64
  // for unit-scale inputs, T = 130 and D = 64.
  Tensor q = uniform64({2, 2, 130, 64}, 900), k = uniform64({2, 2, 130, 64}, 901), v = uniform64({2, 2, 130, 64}, 902);
  Tensor g = uniform64({2, 2, 130, 64}, 903);
  auto fn32 = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return F::scaled_dot_product_attention(a, b, c, {.is_causal = true});
  };
  auto fn64 = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return F::scaled_dot_product_attention_reference(a, b, c, {.is_causal = true});
  };
  TensorList f32 = forward_backward(fn32, q.to(DType::Float32), k.to(DType::Float32), v.to(DType::Float32), g.to(DType::Float32));
  TensorList f64 = forward_backward(fn64, q, k, v, g);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(f32[t].dtype(), DType::Float32);
    expect_values(f32[t], values(f64[t]), 2e-5);
  }
  // 16-bit inputs run the float32 kernel and round the result.
  Tensor bf = F::scaled_dot_product_attention(q.to(DType::BFloat16), k.to(DType::BFloat16), v.to(DType::BFloat16));
  EXPECT_EQ(bf.dtype(), DType::BFloat16);
  expect_values(bf, values(F::scaled_dot_product_attention_reference(q, k, v)), 2e-2);
}

TEST(AttentionFused, CpuAutocastRunsTheFloat32KernelOnce) {
  // Under bfloat16 autocast the float32 inputs are lowered to bfloat16, which
  // the CPU kernel widens to float32 again: the widened call must not be
  // lowered a second time (it recursed until the stack ran out).
  Tensor q = uniform64({1, 2, 9, 8}, 960), k = uniform64({1, 2, 9, 8}, 961), v = uniform64({1, 2, 9, 8}, 962);
  Tensor out;
  {
    AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
    out = F::scaled_dot_product_attention(q.to(DType::Float32), k.to(DType::Float32), v.to(DType::Float32),
                                          {.is_causal = true});
  }
  EXPECT_EQ(out.dtype(), DType::BFloat16);
  expect_values(out, values(F::scaled_dot_product_attention_reference(q, k, v, {.is_causal = true})), 2e-2);
}

TEST(AttentionFused, FloatingInputsTakeTheFusedNode) {
  Tensor q = leaf({1, 2, 4, 3}, 950), k = leaf({1, 2, 5, 3}, 951), v = leaf({1, 2, 5, 2}, 952);
  EXPECT_EQ(F::scaled_dot_product_attention(q, k, v).grad_fn_name(), "ScaledDotProductAttentionBackward");
  // A floating mask that wants a gradient takes the reference, whose last op is the matmul.
  Tensor add = leaf({4, 5}, 953);
  Tensor out = F::scaled_dot_product_attention(q, k, v, {.attn_mask = add});
  EXPECT_NE(out.grad_fn_name(), "ScaledDotProductAttentionBackward");
  kiln::sum(out).backward();
  EXPECT_TRUE(add.grad().defined());
}

TEST(AttentionFused, ErrorsNameTheOpAndTheValues) {
  Tensor q = uniform64({2, 3, 4, 5}, 1), k = uniform64({2, 3, 6, 5}, 2), v = uniform64({2, 3, 6, 7}, 3);
  auto sdpa = [&](const Tensor& a, const Tensor& b, const Tensor& c, const F::ScaledDotProductAttentionOptions& o) {
    F::scaled_dot_product_attention(a, b, c, o);
  };
  expect_error([&] { sdpa(q, uniform64({2, 3, 6, 4}, 4), v, {}); }, "scaled_dot_product_attention: query and key must have the same last dim (D), got query [2, 3, 4, 5] and key [2, 3, 6, 4]");
  expect_error([&] { sdpa(q, k, uniform64({2, 3, 5, 7}, 5), {}); }, "key and value must have the same number of keys (Tk)");
  expect_error([&] { sdpa(q, uniform64({2, 2, 6, 5}, 6), v, {}); }, "must have the same leading (batch, head) dims");
  expect_error([&] { sdpa(q, k.to(DType::Float32), v, {}); }, "one dtype, got float64, float32 and float64");
  expect_error([&] { sdpa(q.to(DType::Int64), k.to(DType::Int64), v.to(DType::Int64), {}); }, "expected a floating query, got int64");
  expect_error([&] { sdpa(uniform64({5}, 7), k, v, {}); }, "of at least 2 dims");
  expect_error([&] { sdpa(q, k, v, {.attn_mask = ones({4, 5}, DType::Bool)}); }, "attn_mask of shape [4, 5] does not broadcast to the scores' shape [2, 3, 4, 6]");
  expect_error([&] { sdpa(q, k, v, {.attn_mask = ones({4, 6}, DType::Int64)}); }, "attn_mask must be Bool (true = attend) or floating");
  expect_error([&] { sdpa(q, k, v, {.dropout_p = 1.5}); }, "dropout_p must be in [0, 1], got 1.5");
  expect_error([&] { sdpa(q, k, v, {.dropout_p = -0.1}); }, "dropout_p must be in [0, 1], got -0.1");
  expect_error([&] { F::scaled_dot_product_attention_reference(q, k, Tensor(), {}); }, "query, key or value is undefined");
  expect_error([&] { F::scaled_dot_product_attention_weights(q, k, {.dropout_p = 0.1}); }, "without dropout, got dropout_p 0.1");
  expect_error([&] { ops::attention_backward(uniform64({2, 3, 4, 6}, 8), q, k, v, Tensor(), ops::attention(q, k, v, Tensor(), {}), {}); },
               "attention_backward: expected grad_out of the output's shape [2, 3, 4, 7], got [2, 3, 4, 6]");
}

#ifdef KILN_WITH_CUDA
#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"

// The CUDA kernels against the CPU's on the same inputs, forward and backward.
void expect_cuda_matches_cpu(DType dtype, const F::ScaledDotProductAttentionOptions& options, double tol) {
  Tensor q = uniform64({2, 3, 37, 24}, 1000), k = uniform64({2, 3, 45, 24}, 1001), v = uniform64({2, 3, 45, 40}, 1002);
  Tensor g = uniform64({2, 3, 37, 40}, 1003);
  auto run = [&](Device device) {
    Generator gen(11);
    F::ScaledDotProductAttentionOptions o = options;
    o.generator = &gen;
    if (o.attn_mask.defined()) o.attn_mask = o.attn_mask.to(device);
    auto fn = [&](const Tensor& a, const Tensor& b, const Tensor& c) { return F::scaled_dot_product_attention(a, b, c, o); };
    return forward_backward(fn, q.to(dtype, device), k.to(dtype, device), v.to(dtype, device), g.to(dtype, device));
  };
  TensorList gpu = run(cuda_device(0)), cpu = run(kCPU);
  for (int t = 0; t < 4; ++t) expect_values(gpu[t], values(cpu[t]), tol);
}

TEST(AttentionCuda, MatchesCpuInFloat64) {
  SKIP_WITHOUT_GPU();
  Tensor keep = ops::gt(uniform64({2, 1, 37, 45}, 1010), -0.5);
  expect_cuda_matches_cpu(DType::Float64, {}, 1e-11);
  expect_cuda_matches_cpu(DType::Float64, {.is_causal = true}, 1e-11);
  expect_cuda_matches_cpu(DType::Float64, {.attn_mask = keep, .dropout_p = 0.25}, 1e-11);
  expect_cuda_matches_cpu(DType::Float64, {.attn_mask = uniform64({37, 45}, 1011), .is_causal = true}, 1e-11);
}

TEST(AttentionCuda, MatchesCpuInFloat32AndHalf) {
  SKIP_WITHOUT_GPU();
  expect_cuda_matches_cpu(DType::Float32, {.dropout_p = 0.1, .is_causal = true}, 1e-5);
  expect_cuda_matches_cpu(DType::Float16, {.is_causal = true}, 2e-2);
  expect_cuda_matches_cpu(DType::BFloat16, {}, 5e-2);
}

TEST(AttentionCuda, MatchesCpuOnStridedHeads) {
  SKIP_WITHOUT_GPU();
  // The heads of one projection against a KV-cache-like slice of a larger
  // buffer, with the gradient as transposed heads (Note [Attention layouts]).
  Tensor qkv = uniform64({2, 37, 3 * 3 * 24}, 1030, -2, 2), cache = uniform64({2, 3, 64, 40}, 1031);
  Tensor g = uniform64({2, 37, 3, 40}, 1032);
  auto run = [&](Device device) {
    TensorList heads = projection_heads(qkv.to(device), 3);  // 3 x (2, 3, 37, 24)
    Tensor v = cache.to(device).narrow(2, 5, 37);             // (2, 3, 37, 40), rows 40 apart, offset
    auto fn = [](const Tensor& a, const Tensor& b, const Tensor& c) {
      return F::scaled_dot_product_attention(a, b, c, {.is_causal = true});
    };
    TensorList r = forward_backward(fn, heads[0], heads[1], v, g.to(device).transpose(1, 2));
    EXPECT_TRUE(in_projection_order(r[0]));
    return r;
  };
  TensorList gpu = run(cuda_device(0)), cpu = run(kCPU);
  for (int t = 0; t < 4; ++t) expect_values(gpu[t], values(cpu[t]), 1e-11);
}

TEST(AttentionCuda, GradcheckOnTheGpu) {
  SKIP_WITHOUT_GPU();
  Tensor q = leaf({1, 2, 5, 3}, 1020).detach().to(cuda_device(0)).requires_grad_();
  Tensor k = leaf({1, 2, 6, 3}, 1021).detach().to(cuda_device(0)).requires_grad_();
  Tensor v = leaf({1, 2, 6, 4}, 1022).detach().to(cuda_device(0)).requires_grad_();
  expect_gradcheck(
      [&](const TensorList& in) {
        Generator gen(12);
        return TensorList{F::scaled_dot_product_attention(in[0], in[1], in[2], {.dropout_p = 0.2, .is_causal = true, .generator = &gen})};
      },
      {q, k, v});
}
#endif  // KILN_WITH_CUDA

}  // namespace
}  // namespace kiln::gradtest
