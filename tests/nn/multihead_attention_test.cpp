// nn::MultiheadAttention: parameters and initialisation as torch's, the
// forward against a hand computation through the reference attention, torch's
// mask conventions, layouts, weights, dropout, gradcheck and errors.
#include <cmath>
#include <limits>

#include "autograd/autograd_test_util.h"
#include "nn/attention.h"
#include "nn/functional.h"

namespace kiln::gradtest {
namespace {

namespace F = kiln::nn::functional;
using nn::MultiheadAttention;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::shared_ptr<MultiheadAttention> float64_attention(int64_t e, int64_t h, nn::MultiheadAttentionOptions o = {}) {
  manual_seed(42);
  auto m = std::make_shared<MultiheadAttention>(e, h, o);
  m->to(DType::Float64);
  // Non-zero biases, so that the test sees where each is added.
  NoGradGuard no_grad;
  m->in_proj_bias.copy_(uniform64({3 * e}, 43));
  m->out_proj->bias.copy_(uniform64({e}, 44));
  return m;
}

// The module's computation by hand: per-head projections and the reference
// attention with a scaled_dot_product_attention mask (true = attend).
Tensor by_hand(const MultiheadAttention& m, const Tensor& query, const Tensor& key, const Tensor& value,
               const Tensor& sdpa_mask, bool causal) {
  const int64_t e = m.embed_dim, h = m.num_heads, hd = e / h, n = query.size(0);
  auto project = [&](const Tensor& x, int64_t which) {
    Tensor w = m.in_proj_weight.narrow(0, which * e, e), b = m.in_proj_bias.narrow(0, which * e, e);
    return F::linear(x, w, b).reshape({n, x.size(1), h, hd}).transpose(1, 2);
  };
  Tensor heads = F::scaled_dot_product_attention_reference(project(query, 0), project(key, 1), project(value, 2),
                                                           {.attn_mask = sdpa_mask, .is_causal = causal});
  return F::linear(heads.transpose(1, 2).reshape({n, query.size(1), e}), m.out_proj->weight, m.out_proj->bias);
}

TEST(MultiheadAttention, ParametersAreNamedAndInitialisedAsTorch) {
  manual_seed(1);
  MultiheadAttention m(8, 2);
  TensorDict params = m.named_parameters();
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m.in_proj_weight.shape(), (Shape{24, 8}));
  EXPECT_EQ(m.out_proj->weight.shape(), (Shape{8, 8}));
  expect_values(m.in_proj_bias, std::vector<double>(24, 0.0));
  expect_values(m.out_proj->bias, std::vector<double>(8, 0.0));
  // xavier_uniform_ on (3E, E): bound sqrt(6 / (E + 3E)); the values fill it.
  const double bound = std::sqrt(6.0 / 32.0);
  double largest = 0;
  for (double w : values(m.in_proj_weight)) largest = std::max(largest, std::abs(w));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.8 * bound);
  // out_proj.weight as a Linear's: U(-1/sqrt(E), 1/sqrt(E)).
  for (double w : values(m.out_proj->weight)) EXPECT_LE(std::abs(w), 1 / std::sqrt(8.0));
  EXPECT_EQ(m.extra_repr(), "embed_dim=8, num_heads=2, dropout=0.0, batch_first=True");
  MultiheadAttention no_bias(8, 2, {.bias = false});
  EXPECT_EQ(no_bias.named_parameters().keys(), (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
}

TEST(MultiheadAttention, SelfAndCrossAttentionMatchAHandComputation) {
  auto m = float64_attention(12, 3);
  Tensor x = uniform64({2, 5, 12}, 2);
  expect_values(m->forward(x), values(by_hand(*m, x, x, x, Tensor(), false)), 1e-12);
  m->is_causal = true;
  expect_values((*m)(x), values(by_hand(*m, x, x, x, Tensor(), true)), 1e-12);
  m->is_causal = false;
  Tensor q = uniform64({2, 5, 12}, 3), kv = uniform64({2, 7, 12}, 4), v = uniform64({2, 7, 12}, 5);
  TensorList out = (*m)({q, kv, v});
  ASSERT_EQ(out.size(), 1u);
  expect_values(out[0], values(by_hand(*m, q, kv, v, Tensor(), false)), 1e-12);
}

TEST(MultiheadAttention, MasksFollowTorchConventions) {
  auto m = float64_attention(8, 2);
  Tensor q = uniform64({2, 4, 8}, 6), k = uniform64({2, 6, 8}, 7), v = uniform64({2, 6, 8}, 8);
  // key_padding_mask: true = padding. Batch 0 pads its last two keys.
  Tensor padding = from_vector<bool>({0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0}, {2, 6});
  Tensor attend = ops::logical_not(padding).view({2, 1, 1, 6});
  expect_values((*m)({q, k, v, padding})[0], values(by_hand(*m, q, k, v, attend, false)), 1e-12);
  // The same as a floating mask.
  Tensor minus_inf = ops::where(padding, full({2, 6}, -kInf, DType::Float64), 0.0);
  expect_values((*m)({q, k, v, minus_inf})[0], values(by_hand(*m, q, k, v, attend, false)), 1e-12);
  // attn_mask (L, S): true = not attended, with the padding mask.
  Tensor blocked = ops::gt(uniform64({4, 6}, 9), 0.5);
  Tensor both = ops::logical_and(attend, ops::logical_not(blocked));
  expect_values((*m)({q, k, v, padding, blocked})[0], values(by_hand(*m, q, k, v, both, false)), 1e-12);
  // A floating attn_mask (N * H, L, S) with a Bool padding mask: added together.
  Tensor per_head = uniform64({4, 4, 6}, 10, -2, 2);
  Tensor sum = ops::add(per_head.view({2, 2, 4, 6}), ops::where(attend, zeros({2, 1, 1, 6}, DType::Float64), -kInf));
  expect_values((*m)({q, k, v, padding, per_head})[0], values(by_hand(*m, q, k, v, sum, false)), 1e-12);
  // Undefined tensors stand for absent masks.
  expect_values((*m)({q, k, v, Tensor(), blocked})[0],
                values(by_hand(*m, q, k, v, ops::logical_not(blocked), false)), 1e-12);
}

TEST(MultiheadAttention, SequenceFirstAndUnbatchedLayouts) {
  auto first = float64_attention(8, 4);
  auto second = float64_attention(8, 4, {.batch_first = false});
  Tensor x = uniform64({3, 5, 8}, 11);  // (N, L, E)
  Tensor expected = first->forward(x);
  expect_values(second->forward(x.transpose(0, 1)).transpose(0, 1), values(expected), 1e-12);
  // Unbatched (L, E): the first batch element's result.
  expect_values(first->forward(x.select(0, 0)), values(expected.select(0, 0)), 1e-12);
}

TEST(MultiheadAttention, NeedWeightsReturnsTheAveragedProbabilities) {
  auto m = float64_attention(8, 2);
  Tensor q = uniform64({2, 4, 8}, 12), k = uniform64({2, 6, 8}, 13);
  m->need_weights = true;
  TensorList out = (*m)({q, k, k});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].shape(), (Shape{2, 4, 6}));
  expect_values(ops::sum(out[1], {-1}), std::vector<double>(8, 1.0), 1e-12);
  // By hand: the heads' probabilities, averaged.
  auto project = [&](const Tensor& x, int64_t which) {
    return F::linear(x, m->in_proj_weight.narrow(0, which * 8, 8), m->in_proj_bias.narrow(0, which * 8, 8))
        .reshape({2, x.size(1), 2, 4})
        .transpose(1, 2);
  };
  Tensor scores = ops::div(ops::matmul(project(q, 0), project(k, 1).transpose(-2, -1)), 2.0);
  Tensor probs = ops::softmax(scores, -1);
  expect_values(out[1], values(ops::mean(probs, {1})), 1e-12);
  m->average_attn_weights = false;
  expect_values((*m)({q, k, k})[1], values(probs), 1e-12);
}

TEST(MultiheadAttention, DropoutOnlyInTraining) {
  auto m = float64_attention(8, 2, {.dropout = 0.5});
  Tensor x = uniform64({2, 6, 8}, 14);
  m->eval();
  Tensor eval_out = m->forward(x);
  expect_values(eval_out, values(by_hand(*m, x, x, x, Tensor(), false)), 1e-12);
  m->train();
  Tensor train_out = m->forward(x);
  EXPECT_GT(values(ops::amax(ops::abs(ops::sub(train_out, eval_out)))).at(0), 1e-3);
}

TEST(MultiheadAttention, Gradcheck) {
  auto m = float64_attention(6, 2);
  Tensor q = leaf({2, 3, 6}, 15), k = leaf({2, 4, 6}, 16), v = leaf({2, 4, 6}, 17);
  Tensor padding = from_vector<bool>({0, 0, 0, 1, 0, 0, 0, 0}, {2, 4});
  m->is_causal = true;
  expect_gradcheck([&](const TensorList& in) { return TensorList{(*m)({in[0], in[1], in[2], padding})[0]}; },
                   {q, k, v});
  expect_gradcheck([&](const TensorList& in) { return TensorList{m->forward(in[0])}; }, {q});
}

TEST(MultiheadAttention, ErrorsNameTheModuleAndTheValues) {
  expect_error([] { MultiheadAttention(10, 3); }, "MultiheadAttention: embed_dim (10) must be divisible by num_heads (3)");
  expect_error([] { MultiheadAttention(0, 1); }, "embed_dim and num_heads must be positive, got 0 and 1");
  expect_error([] { MultiheadAttention(4, 2, {.dropout = 2.0}); }, "dropout must be in [0, 1], got 2");
  MultiheadAttention m(8, 2);
  Tensor x = rand({2, 5, 8}), k = rand({2, 6, 8});
  expect_error([&] { m({x, x}); }, "expected {x} or {query, key, value[, key_padding_mask[, attn_mask]]}, got 2 tensors");
  expect_error([&] { m.forward(rand({2, 5, 7})); }, "with embed_dim 8 as the last dim, got [2, 5, 7]");
  expect_error([&] { m.forward(rand({5})); }, "expected a query of shape (N, L, E) or (L, E), got [5]");
  expect_error([&] { m({x, k, rand({2, 5, 8})}); }, "key and value must have the query's batch size and the same length");
  expect_error([&] { m({x, k, k, ones({2, 5}, DType::Bool)}); }, "expected key_padding_mask of shape [2, 6] (N, S), got [2, 5]");
  expect_error([&] { m({x, k, k, Tensor(), ones({6, 5}, DType::Bool)}); },
               "expected attn_mask of shape [5, 6] (L, S) or [4, 5, 6] (N * num_heads, L, S), got [6, 5]");
}

}  // namespace
}  // namespace kiln::gradtest
