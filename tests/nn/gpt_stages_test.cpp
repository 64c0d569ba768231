// GPT pipeline stages (nn/models/gpt_stages.h): chained stages against
// GPT::forward and GPT::loss bit for bit (logits and every gradient, also
// with the graph cut between stages as a pipeline cuts it), the keys and
// tensors the stages share with the model, the tied weight, the errors, and
// even_balance.
#include "nn/models/gpt_stages.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/nn_test_util.h"
#include "tensor/factory.h"
#include "tensor/random.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::nn::gpt {
namespace {

using nn::testing::expect_error;
using nn::testing::expect_error_parts;
using nn::testing::values_of;

// Vocabulary 11, 8 positions, 4 layers of 2 heads, width 16.
std::shared_ptr<GPT> tiny_gpt(uint64_t seed, double dropout = 0.0) {
  manual_seed(seed);
  return std::make_shared<GPT>(
      GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 4, .n_head = 2, .n_embd = 16, .dropout = dropout});
}

Tensor tokens(int64_t B, int64_t T, uint64_t seed) {
  Generator gen(seed);
  return randint(0, 11, {B, T}, DType::Int64, &gen);
}

// stage_{S-1}(... stage_0({idx})): the logits (B, T, V).
Tensor run_chained(const StageSplit& split, const Tensor& idx) {
  TensorList x = {idx};
  for (const auto& stage : split.stages) x = (*stage)(x);
  EXPECT_EQ(x.size(), 1u);
  return x[0];
}

// The balances tried everywhere: 1 to 4 stages, and stages without blocks.
const std::vector<std::vector<int64_t>> kBalances = {{4},          {2, 2},    {3, 1},    {1, 2, 1},
                                                     {1, 1, 1, 1}, {0, 4, 0}, {2, 0, 2}, {4, 0}};

std::string str(const std::vector<int64_t>& balance) {
  std::string s;
  for (int64_t b : balance) s += std::to_string(b) + " ";
  return s;
}

// Every parameter's gradient by name (the tied one once, under the model's first name).
std::map<std::string, std::vector<double>> grads_of(const GPT& model) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_TRUE(p.grad().defined()) << name;
    if (p.grad().defined()) out[name] = values_of(p.grad());
  }
  return out;
}

// ---- values ----

TEST(GPTStages, ChainedStagesEqualForwardBitForBit) {
  auto gpt = tiny_gpt(1);
  Tensor idx = tokens(3, 8, 2);
  const std::vector<double> expected = values_of(gpt->forward(idx));  // (3, 8, 11)
  for (const auto& balance : kBalances) {
    StageSplit split = split_into_stages(*gpt, balance);
    ASSERT_EQ(split.stages.size(), balance.size());
    Tensor logits = run_chained(split, idx);
    EXPECT_EQ(logits.shape(), (Shape{3, 8, 11})) << str(balance);
    EXPECT_EQ(values_of(logits), expected) << str(balance);
  }
}

TEST(GPTStages, EachStageReturnsItsShape) {
  auto gpt = tiny_gpt(3);
  StageSplit split = split_into_stages(*gpt, {1, 2, 1});
  TensorList x0 = (*split.stages[0])(TensorList{tokens(2, 5, 4)});
  ASSERT_EQ(x0.size(), 1u);
  EXPECT_EQ(x0[0].shape(), (Shape{2, 5, 16}));
  TensorList x1 = (*split.stages[1])(x0);
  EXPECT_EQ(x1[0].shape(), (Shape{2, 5, 16}));
  EXPECT_EQ((*split.stages[2])(x1[0]).shape(), (Shape{2, 5, 11}));  // one tensor in, one out
  // A middle stage without blocks passes its input through untouched.
  StageSplit with_empty = split_into_stages(*gpt, {2, 0, 2});
  EXPECT_TRUE((*with_empty.stages[1])(x0[0]).is_same(x0[0]));
}

// Dropout draws from the default generator in op order: the same draws,
// and so the same logits, only if the stages run GPT's ops in GPT's order.
TEST(GPTStages, ChainedStagesDrawTheSameDropoutAsForward) {
  auto gpt = tiny_gpt(5, /*dropout=*/0.2);
  Tensor idx = tokens(2, 8, 6);
  manual_seed(7);
  const std::vector<double> expected = values_of(gpt->forward(idx));
  manual_seed(8);
  EXPECT_NE(values_of(gpt->forward(idx)), expected);  // dropout is on: another seed differs
  for (const auto& balance : kBalances) {
    StageSplit split = split_into_stages(*gpt, balance);
    manual_seed(7);
    EXPECT_EQ(values_of(run_chained(split, idx)), expected) << str(balance);
  }
}

// ---- gradients ----

TEST(GPTStages, GradientsThroughChainedStagesEqualLoss) {
  auto gpt = tiny_gpt(9);
  Tensor idx = tokens(2, 8, 10), targets = tokens(2, 8, 11);
  gpt->loss(idx, targets).backward();
  const auto expected = grads_of(*gpt);
  ASSERT_EQ(expected.size(), gpt->parameters().size());
  for (const auto& balance : kBalances) {
    gpt->zero_grad();
    StageSplit split = split_into_stages(*gpt, balance);
    GPT::loss_from_logits(run_chained(split, idx), targets).backward();
    EXPECT_EQ(grads_of(*gpt), expected) << str(balance);
  }
}

// As a pipeline runs it: each stage's input is a fresh leaf (what a receive
// gives), and backward goes stage by stage, each from the gradient of the
// next stage's input. The tied weight's two gradients meet in one tensor.
TEST(GPTStages, GradientsWithTheGraphCutBetweenStagesEqualLoss) {
  auto gpt = tiny_gpt(12);
  Tensor idx = tokens(3, 7, 13), targets = tokens(3, 7, 14);
  gpt->loss(idx, targets).backward();
  const auto expected = grads_of(*gpt);
  for (const auto& balance : kBalances) {
    gpt->zero_grad();
    StageSplit split = split_into_stages(*gpt, balance);
    const size_t S = split.stages.size();
    std::vector<Tensor> inputs(S), outputs(S);
    inputs[0] = idx;
    for (size_t s = 0; s < S; ++s) {
      if (s > 0) {
        inputs[s] = outputs[s - 1].detach();
        inputs[s].requires_grad_();
      }
      outputs[s] = (*split.stages[s])(inputs[s]);
    }
    GPT::loss_from_logits(outputs[S - 1], targets).backward();
    for (size_t s = S - 1; s-- > 0;) {
      ASSERT_TRUE(inputs[s + 1].grad().defined()) << str(balance) << "stage " << s + 1;
      outputs[s].backward(inputs[s + 1].grad());
    }
    EXPECT_EQ(grads_of(*gpt), expected) << str(balance);
  }
}

// ---- keys and sharing ----

TEST(GPTStages, StateDictKeysAreTheModelsKeysInOrder) {
  auto gpt = tiny_gpt(15);
  const std::vector<std::string> model_keys = gpt->state_dict().keys();
  for (const auto& balance : kBalances) {
    StageSplit split = split_into_stages(*gpt, balance);
    std::vector<std::string> keys;
    for (const auto& stage : split.stages) {
      for (const std::string& key : stage->state_dict().keys()) keys.push_back(key);
    }
    EXPECT_EQ(keys, model_keys) << str(balance);
  }
  // A block keeps its global number on the stage that holds it.
  StageSplit split = split_into_stages(*gpt, {1, 2, 1});
  EXPECT_EQ(
      split.stages[2]->state_dict().keys(),
      (std::vector<std::string>{
          "transformer.h.3.ln_1.weight", "transformer.h.3.ln_1.bias", "transformer.h.3.attn.c_attn.weight",
          "transformer.h.3.attn.c_attn.bias", "transformer.h.3.attn.c_proj.weight", "transformer.h.3.attn.c_proj.bias",
          "transformer.h.3.ln_2.weight", "transformer.h.3.ln_2.bias", "transformer.h.3.mlp.c_fc.weight",
          "transformer.h.3.mlp.c_fc.bias", "transformer.h.3.mlp.c_proj.weight", "transformer.h.3.mlp.c_proj.bias",
          "transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"}));
  EXPECT_EQ(split.stages[1]->state_dict().keys().front(), "transformer.h.1.ln_1.weight");
  EXPECT_EQ(split.stages[0]->state_dict().keys().front(), "transformer.wte.weight");
}

TEST(GPTStages, StagesHoldTheModelsTensorsNotCopies) {
  auto gpt = tiny_gpt(16);
  StageSplit split = split_into_stages(*gpt, {1, 1, 2});
  size_t held = 0;
  for (const auto& stage : split.stages) {
    TensorDict state = stage->state_dict();
    for (const auto& [key, p] : stage->named_parameters()) {
      EXPECT_TRUE(p.is_same(gpt->get_parameter(key))) << key;
      EXPECT_EQ(state.at(key).impl()->storage().get(), p.impl()->storage().get()) << key;
      ++held;
    }
  }
  // Every parameter once, and the tied one twice (embedding and head).
  EXPECT_EQ(held, gpt->parameters().size() + 1);
  // A change made through the model is seen by the stages.
  Tensor idx = tokens(2, 4, 17);
  {
    NoGradGuard no_grad;
    kiln::mul_(gpt->ln_f->weight, 2.0);
  }
  EXPECT_EQ(values_of(run_chained(split, idx)), values_of(gpt->forward(idx)));
}

TEST(GPTStages, TheStagesStateDictsTogetherLoadIntoAModel) {
  auto source = tiny_gpt(18);
  auto target = tiny_gpt(19);
  Tensor idx = tokens(2, 6, 20);
  ASSERT_NE(values_of(target->forward(idx)), values_of(source->forward(idx)));
  StageSplit split = split_into_stages(*source, {2, 1, 1});
  TensorDict merged;
  for (const auto& stage : split.stages) {
    for (const auto& [key, t] : stage->state_dict()) merged.insert(key, t);
  }
  IncompatibleKeys result = target->load_state_dict(merged, /*strict=*/true);
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  EXPECT_EQ(values_of(target->forward(idx)), values_of(source->forward(idx)));
}

// ---- tied weights ----

TEST(GPTStages, TiedListsTheEmbeddingAndTheHead) {
  auto gpt = tiny_gpt(21);
  for (const auto& balance : kBalances) {
    StageSplit split = split_into_stages(*gpt, balance);
    const int S = static_cast<int>(balance.size());
    if (S == 1) {
      EXPECT_TRUE(split.tied.empty());
      continue;
    }
    using Holders = std::vector<std::pair<int, std::string>>;
    ASSERT_EQ(split.tied.size(), 1u) << str(balance);
    EXPECT_EQ(split.tied[0], (Holders{{0, "transformer.wte.weight"}, {S - 1, "lm_head.weight"}})) << str(balance);
    EXPECT_TRUE(split.stages[0]
                    ->get_parameter("transformer.wte.weight")
                    .is_same(split.stages[static_cast<size_t>(S - 1)]->get_parameter("lm_head.weight")));
  }
}

TEST(GPTStages, OneStageHoldsTheTiedWeightOnceUnderBothKeys) {
  auto gpt = tiny_gpt(22);
  StageSplit split = split_into_stages(*gpt, {4});
  const Module& stage = *split.stages[0];
  EXPECT_EQ(stage.parameters().size(), gpt->parameters().size());
  EXPECT_EQ(stage.state_dict().keys(), gpt->state_dict().keys());  // both keys, as GPT
  EXPECT_TRUE(stage.get_parameter("lm_head.weight").is_same(stage.get_parameter("transformer.wte.weight")));
}

// ---- the Stage module ----

TEST(GPTStages, StagesAreTypedAndPrintTheirBlocks) {
  auto gpt = tiny_gpt(23);
  StageSplit split = split_into_stages(*gpt, {1, 2, 1});
  auto middle = std::dynamic_pointer_cast<Stage>(split.stages[1]);
  ASSERT_NE(middle, nullptr);
  EXPECT_EQ(middle->extra_repr(), "stage=1, num_stages=3, blocks=[1, 3)");
  EXPECT_FALSE(middle->is_first());
  EXPECT_FALSE(middle->is_last());
  EXPECT_EQ(middle->wte, nullptr);
  EXPECT_EQ(middle->lm_head, nullptr);
  ASSERT_EQ(middle->blocks.size(), 2u);
  EXPECT_EQ(middle->blocks[0], gpt->blocks[1]);
  EXPECT_EQ(middle->blocks[1], gpt->blocks[2]);
  auto last = std::dynamic_pointer_cast<Stage>(split.stages[2]);
  EXPECT_EQ(last->lm_head, gpt->lm_head);
  EXPECT_EQ(last->ln_f, gpt->ln_f);
  // train() on a stage reaches the model's modules it holds.
  split.stages[1]->eval();
  EXPECT_FALSE(gpt->blocks[1]->is_training());
  EXPECT_TRUE(gpt->blocks[0]->is_training());
}

// ---- errors ----

TEST(GPTStages, SplitRejectsBadBalances) {
  auto gpt = tiny_gpt(24);
  expect_error([&] { split_into_stages(*gpt, {}); }, "split_into_stages: blocks_per_stage is empty");
  expect_error_parts(
      [&] {
        split_into_stages(*gpt, {3, -1, 2});
      },
      {"split_into_stages: stage 1 has -1 blocks", "counts must be >= 0"});
  expect_error_parts(
      [&] {
        split_into_stages(*gpt, {2, 1});
      },
      {"split_into_stages: blocks_per_stage", "sums to 3, the model has n_layer 4"});
  expect_error_parts([&] { split_into_stages(*gpt, {2, 2, 1}); }, {"sums to 5, the model has n_layer 4"});
}

TEST(GPTStages, StagesRejectBadInputsNamingTheStage) {
  auto gpt = tiny_gpt(25);
  StageSplit split = split_into_stages(*gpt, {2, 1, 1});
  Module& first = *split.stages[0];
  Module& middle = *split.stages[1];
  expect_error([&] { first(zeros({2, 4}, DType::Float32)); }, "GPT stage 0: idx must hold Int64 token ids");
  expect_error([&] { first(zeros({8}, DType::Int64)); }, "GPT stage 0: idx must have shape (B, T) with T >= 1");
  expect_error([&] { first(tokens(1, 9, 26)); },
               "GPT stage 0: cannot forward a sequence of length 9, block_size is only 8");
  expect_error(
      [&] {
        first(TensorList{tokens(1, 4, 27), tokens(1, 4, 28)});
      },
      "GPT stage 0: expected one input, {idx (B, T) Int64}, got 2");
  expect_error([&] { middle(zeros({2, 4, 15})); }, "GPT stage 1: expected x of shape (B, T, 16)");
  expect_error([&] { middle(tokens(2, 4, 29)); }, "GPT stage 1: expected x of shape (B, T, 16)");
  expect_error([&] { middle(TensorList{}); }, "GPT stage 1: expected one input, {x (B, T, E)}, got 0");
}

// ---- even_balance ----

TEST(GPTStages, EvenBalanceGivesTheExtraBlocksToTheFirstStages) {
  EXPECT_EQ(even_balance(5, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(even_balance(4, 4), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(even_balance(4, 3), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(even_balance(12, 5), (std::vector<int64_t>{3, 3, 2, 2, 2}));
  EXPECT_EQ(even_balance(7, 1), (std::vector<int64_t>{7}));
  EXPECT_EQ(even_balance(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(even_balance(0, 2), (std::vector<int64_t>{0, 0}));
  expect_error([] { even_balance(4, 0); }, "even_balance: num_stages must be >= 1, got 0");
  expect_error([] { even_balance(-1, 2); }, "even_balance: n_layer must be >= 0, got -1");
  // Its result is a valid split.
  auto gpt = tiny_gpt(30);
  EXPECT_EQ(split_into_stages(*gpt, even_balance(4, 3)).stages.size(), 3u);
}

#ifdef KILN_WITH_CUDA
TEST(GPTStages, CudaStagesEqualCudaForward) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  auto gpt = tiny_gpt(31);
  gpt->to(cuda_device(0));
  Tensor idx = tokens(2, 8, 32).to(cuda_device(0)), targets = tokens(2, 8, 33).to(cuda_device(0));
  gpt->loss(idx, targets).backward();
  const auto expected = grads_of(*gpt);
  const std::vector<double> logits = values_of(gpt->forward(idx));
  gpt->zero_grad();
  StageSplit split = split_into_stages(*gpt, {1, 2, 1});
  Tensor chained = run_chained(split, idx);
  EXPECT_EQ(chained.device(), cuda_device(0));
  EXPECT_EQ(values_of(chained), logits);
  GPT::loss_from_logits(chained, targets).backward();
  EXPECT_EQ(grads_of(*gpt), expected);
}
#endif

}  // namespace
}  // namespace kiln::nn::gpt
