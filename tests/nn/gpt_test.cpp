// GPT (nn/models/gpt.h): shapes, nanoGPT's parameter names and count, the
// tied embedding (one tensor, gradient from both uses, both state-dict
// keys), GPT-2's initialisation, the errors, generation with and without
// the KV cache against a plain nanoGPT loop, and a small overfit. The
// comparison with PyTorch is tests/optim/gpt_parity_test.cpp.
#include "nn/models/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/nn_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::nn {
namespace {

using testing::expect_error;
using testing::expect_error_parts;
using testing::values_of;

// The parity test's config: vocabulary 65, 16 positions, 2 layers of 2 heads, width 32.
GPTConfig small_config(bool bias = true) {
  return GPTConfig{.vocab_size = 65, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32, .bias = bias};
}

std::shared_ptr<GPT> small_gpt(uint64_t seed = 0, DType dtype = DType::Float32, bool bias = true) {
  manual_seed(seed);
  auto gpt = std::make_shared<GPT>(small_config(bias));
  gpt->to(dtype);
  return gpt;
}

Tensor tokens(int64_t B, int64_t T, uint64_t seed, int64_t vocab = 65) {
  Generator gen(seed);
  return randint(0, vocab, {B, T}, DType::Int64, &gen);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = values_of(a), y = values_of(b);
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

// ---- shapes, names, count ----

TEST(GPT, ForwardGivesLogitsForEveryPosition) {
  auto gpt = small_gpt();
  EXPECT_EQ(gpt->forward(tokens(3, 7, 1)).shape(), (Shape{3, 7, 65}));
  EXPECT_EQ((*gpt)(tokens(1, 16, 2)).shape(), (Shape{1, 16, 65}));  // block_size tokens exactly
  Tensor loss = gpt->loss(tokens(2, 5, 3), tokens(2, 5, 4));
  EXPECT_EQ(loss.dim(), 0);
  // A fresh model predicts nearly uniformly: the loss is close to ln(65).
  EXPECT_NEAR(loss.item<double>(), std::log(65.0), 0.05);
}

// The keys of nanoGPT's named_parameters(), in its order (the tied weight
// once, as transformer.wte.weight).
std::vector<std::string> nanogpt_parameter_names(int n_layer, bool bias) {
  std::vector<std::string> names = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int l = 0; l < n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    for (const char* layer : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      names.push_back(p + layer + ".weight");
      if (bias) names.push_back(p + layer + ".bias");
    }
  }
  names.push_back("transformer.ln_f.weight");
  if (bias) names.push_back("transformer.ln_f.bias");
  return names;
}

TEST(GPT, ParameterNamesAreNanoGPTs) {
  for (bool bias : {true, false}) {
    auto gpt = small_gpt(0, DType::Float32, bias);
    EXPECT_EQ(gpt->named_parameters().keys(), nanogpt_parameter_names(2, bias)) << "bias " << bias;
    // state_dict() also lists the tied weight under the head's name, as torch's.
    std::vector<std::string> state_keys = nanogpt_parameter_names(2, bias);
    state_keys.push_back("lm_head.weight");
    EXPECT_EQ(gpt->state_dict().keys(), state_keys) << "bias " << bias;
  }
  auto gpt = small_gpt();
  EXPECT_EQ(gpt->get_parameter("transformer.h.1.attn.c_attn.weight").shape(), (Shape{96, 32}));
  EXPECT_EQ(gpt->get_parameter("transformer.h.0.mlp.c_proj.weight").shape(), (Shape{32, 128}));
  EXPECT_EQ(gpt->get_parameter("transformer.wpe.weight").shape(), (Shape{16, 32}));
  EXPECT_EQ(gpt->get_parameter("lm_head.weight").shape(), (Shape{65, 32}));
}

TEST(GPT, ParameterCountMatchesTheFormula) {
  for (bool bias : {true, false}) {
    GPTConfig c = small_config(bias);
    manual_seed(0);
    GPT gpt(c);
    const int64_t V = 65, T = 16, L = 2, E = 32;
    // wte, wpe; per layer: two LayerNorms, c_attn, attn.c_proj, c_fc, mlp.c_proj; ln_f.
    int64_t expected = V * E + T * E + L * (2 * E + 3 * E * E + E * E + 4 * E * E + 4 * E * E) + E;
    if (bias) expected += L * (2 * E + 3 * E + E + 4 * E + E) + E;
    int64_t counted = 0;
    for (const Tensor& p : gpt.parameters()) counted += p.numel();
    EXPECT_EQ(counted, expected) << "bias " << bias;
    EXPECT_EQ(gpt.num_parameters(/*non_embedding=*/false), expected);
    EXPECT_EQ(gpt.num_parameters(), expected - T * E);  // less the position embeddings, as nanoGPT
    EXPECT_EQ(c.num_parameters(), expected);
  }
  // GPT-2 small (vocabulary 50257) is the 124M model: 124,439,808 parameters.
  EXPECT_EQ((GPTConfig{.vocab_size = 50257}).num_parameters(), 124439808);
}

// ---- the tied embedding (Note [Tied embedding weights]) ----

TEST(GPT, TheHeadAndTheTokenEmbeddingAreOneTensor) {
  auto gpt = small_gpt();
  EXPECT_EQ(gpt->lm_head->weight.impl(), gpt->wte->weight.impl());
  TensorDict state = gpt->state_dict();
  EXPECT_EQ(state.at("lm_head.weight").data_ptr(), state.at("transformer.wte.weight").data_ptr());
  // Still one tensor after a dtype conversion.
  gpt->to(DType::Float64);
  EXPECT_EQ(gpt->lm_head->weight.impl(), gpt->wte->weight.impl());
  EXPECT_EQ(gpt->lm_head->weight.dtype(), DType::Float64);
  int64_t seen = 0;
  for (const Tensor& p : gpt->parameters()) seen += p.impl() == gpt->wte->weight.impl();
  EXPECT_EQ(seen, 1);
}

TEST(GPT, TheTiedGradientIsTheSumOfBothUses) {
  auto tied = small_gpt(3, DType::Float64);
  // The same model with the head given its own copy of the weight.
  auto untied = small_gpt(3, DType::Float64);
  untied->lm_head =
      untied->replace_module("lm_head", std::make_shared<gpt::TiedLinear>(untied->wte->weight.detach().clone()));
  ASSERT_NE(untied->lm_head->weight.impl(), untied->wte->weight.impl());
  Tensor x = tokens(2, 9, 5), y = tokens(2, 9, 6);
  tied->loss(x, y).backward();
  untied->loss(x, y).backward();
  Tensor from_embedding = untied->wte->weight.grad(), from_head = untied->lm_head->weight.grad();
  // Both uses contribute: neither part is negligible.
  EXPECT_GT(max_abs_diff(from_embedding, zeros_like(from_embedding)), 1e-4);
  EXPECT_GT(max_abs_diff(from_head, zeros_like(from_head)), 1e-4);
  EXPECT_LT(max_abs_diff(tied->wte->weight.grad(), ops::add(from_embedding, from_head)), 1e-14);
  EXPECT_EQ(tied->lm_head->weight.grad().impl(), tied->wte->weight.grad().impl());
}

TEST(GPT, StateDictNeedsBothTiedKeysInStrictMode) {
  auto source = small_gpt(4);
  auto target = small_gpt(5);
  TensorDict state = source->state_dict();
  TensorDict without_head;
  for (const auto& [key, t] : state) {
    if (key != "lm_head.weight") without_head.insert(key, t);
  }
  expect_error([&] { target->load_state_dict(without_head); }, "Missing key(s) in state_dict: \"lm_head.weight\"");
  // What the safetensors library's save_model writes (one name per shared tensor) loads non-strictly.
  IncompatibleKeys keys = target->load_state_dict(without_head, /*strict=*/false);
  EXPECT_EQ(keys.missing_keys, (std::vector<std::string>{"lm_head.weight"}));
  EXPECT_EQ(values_of(target->lm_head->weight), values_of(source->wte->weight));
  // The whole dict round-trips, and the loaded model computes the same logits.
  auto again = small_gpt(6);
  again->load_state_dict(state);
  Tensor x = tokens(2, 8, 7);
  EXPECT_EQ(values_of(again->forward(x)), values_of(source->forward(x)));
}

// ---- initialisation ----

struct Moments {
  double mean, std;
};
Moments moments(const Tensor& t) {
  std::vector<double> v = values_of(t);
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / static_cast<double>(v.size()))};
}

TEST(GPT, InitialisationIsGPT2s) {
  manual_seed(11);
  GPT gpt(GPTConfig{.vocab_size = 1000, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128});
  const double residual_std = 0.02 / std::sqrt(8.0);  // 2 * n_layer residual projections
  for (const auto& [name, p] : gpt.named_parameters()) {
    const bool is_bias = name.size() > 5 && name.substr(name.size() - 5) == ".bias";
    const bool is_norm = name.find("ln_") != std::string::npos;
    if (is_bias) {
      EXPECT_EQ(max_abs_diff(p, zeros_like(p)), 0.0) << name;
    } else if (is_norm) {
      EXPECT_EQ(max_abs_diff(p, ones_like(p)), 0.0) << name;
    } else {
      const bool residual = name.find("c_proj.weight") != std::string::npos;
      const double want = residual ? residual_std : 0.02;
      Moments m = moments(p);
      // >= 8,192 draws each: the sample std is within 3% and the mean
      // within 4 standard errors.
      EXPECT_NEAR(m.std, want, 0.03 * want) << name;
      EXPECT_NEAR(m.mean, 0.0, 4 * want / std::sqrt(static_cast<double>(p.numel()))) << name;
    }
  }
}

// ---- errors ----

TEST(GPT, RejectsBadConfigs) {
  expect_error_parts([] { GPT(GPTConfig{.vocab_size = 65, .block_size = 16, .n_layer = 2, .n_head = 3, .n_embd = 32}); },
                     {"n_embd 32", "n_head 3"});
  expect_error([] { GPT(GPTConfig{.vocab_size = 0}); }, "vocab_size must be positive, got 0");
  expect_error([] { GPT(GPTConfig{.block_size = -1}); }, "block_size must be positive, got -1");
  expect_error([] { GPT(GPTConfig{.n_layer = 0}); }, "n_layer must be positive, got 0");
  expect_error([] { GPT(GPTConfig{.dropout = 1.0}); }, "dropout must be in [0, 1), got 1");
}

TEST(GPT, RejectsBadTokens) {
  auto gpt = small_gpt();
  expect_error_parts([&] { gpt->forward(tokens(2, 17, 1)); },
                     {"GPT: cannot forward a sequence of length 17", "block_size is only 16"});
  expect_error([&] { gpt->forward(tokens(2, 5, 1).to(DType::Int32)); }, "idx must hold Int64 token ids, got int32");
  expect_error([&] { gpt->forward(randn({2, 5})); }, "idx must hold Int64 token ids, got float32");
  expect_error([&] { gpt->forward(tokens(2, 5, 1).reshape({10})); }, "idx must have shape (B, T)");
  expect_error_parts([&] { gpt->loss(tokens(2, 5, 1), tokens(2, 4, 1)); }, {"GPT::loss", "[2, 5, 65]", "[2, 4]"});
}

TEST(GPT, RejectsBadGenerationArguments) {
  auto gpt = small_gpt();
  Tensor prompt = tokens(1, 3, 1);
  expect_error([&] { gpt->generate(prompt, -1); }, "max_new_tokens must be >= 0, got -1");
  expect_error([&] { gpt->generate(prompt, 2, {.temperature = -0.5}); }, "temperature must be finite and >= 0, got -0.5");
  expect_error([&] { gpt->generate(prompt, 2, {.top_k = 0}); }, "top_k must be >= 1, got 0");
  expect_error([&] { gpt->generate(prompt.to(DType::Int32), 2); }, "GPT::generate: idx must hold Int64");
  std::vector<gpt::KVCache> cache = gpt->new_cache();
  gpt->next_token_logits(prompt, cache);
  expect_error([&] { gpt->next_token_logits(tokens(1, 2, 2), cache); },
               "with 3 cached tokens, one new token is run at a time, got 2");
  for (int i = 3; i < 16; ++i) gpt->next_token_logits(tokens(1, 1, i), cache);
  expect_error([&] { gpt->next_token_logits(tokens(1, 1, 2), cache); },
               "cannot forward 1 tokens after 16 cached ones, block_size is only 16");
  std::vector<gpt::KVCache> short_cache(1);
  expect_error([&] { gpt->next_token_logits(prompt, short_cache); }, "the cache has 1 layers, the model 2");
}

// ---- generation (Note [KV cache and learned positions]) ----

TEST(GPT, CachedStepsGiveTheFullForwardsLastLogits) {
  auto gpt = small_gpt(7, DType::Float64);
  gpt->eval();
  Tensor seq = tokens(2, 5, 8);
  std::vector<gpt::KVCache> cache = gpt->new_cache();
  Tensor cached = gpt->next_token_logits(seq, cache);  // the prefill
  for (int64_t len = 5; len <= 16; ++len) {
    Tensor full = gpt->forward(seq).select(1, len - 1);  // (B, V)
    ASSERT_EQ(cached.shape(), (Shape{2, 65}));
    EXPECT_LT(max_abs_diff(cached, full), 1e-12) << "after " << len << " tokens";
    EXPECT_EQ(cache[0].length, len);
    if (len == 16) break;
    Tensor next = tokens(2, 1, 100 + len);
    seq = cat({seq, next}, 1);
    cached = gpt->next_token_logits(next, cache);
  }
}

// nanoGPT's generate with temperature 0: each token is the argmax of a
// forward over the last block_size tokens.
Tensor greedy_reference(GPT& gpt, Tensor seq, int64_t new_tokens) {
  NoGradGuard no_grad;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t T = seq.size(1), w = std::min<int64_t>(T, gpt.config.block_size);
    Tensor logits = gpt.forward(seq.narrow(1, T - w, w).contiguous()).select(1, w - 1);
    seq = cat({seq, argmax(logits, -1, true)}, 1);
  }
  return seq;
}

TEST(GPT, GreedyGenerationIsTheSameWithAndWithoutTheCachePastBlockSize) {
  auto gpt = small_gpt(9, DType::Float64);
  gpt->eval();
  Tensor prompt = tokens(3, 5, 10);
  // 5 + 30 tokens: the window slides for the last 19.
  Tensor want = greedy_reference(*gpt, prompt, 30);
  Tensor cached = gpt->generate(prompt, 30, {.temperature = 0.0, .use_kv_cache = true});
  Tensor uncached = gpt->generate(prompt, 30, {.temperature = 0.0, .use_kv_cache = false});
  ASSERT_EQ(cached.shape(), (Shape{3, 35}));
  EXPECT_EQ(values_of(cached), values_of(want));
  EXPECT_EQ(values_of(uncached), values_of(want));
  EXPECT_EQ(values_of(cached.narrow(1, 0, 5)), values_of(prompt));
  // A prompt longer than block_size is cropped to its last 16 tokens.
  Tensor long_prompt = tokens(2, 20, 11);
  EXPECT_EQ(values_of(gpt->generate(long_prompt, 4, {.temperature = 0.0})),
            values_of(greedy_reference(*gpt, long_prompt, 4)));
}

TEST(GPT, GreedyGenerationInFloat32AgreesWithTheReference) {
  auto gpt = small_gpt(12);
  Tensor prompt = tokens(2, 3, 13);
  EXPECT_EQ(values_of(gpt->generate(prompt, 20, {.temperature = 0.0})), values_of(greedy_reference(*gpt, prompt, 20)));
}

TEST(GPT, SamplingWithASeededGeneratorIsReproducible) {
  auto gpt = small_gpt(14, DType::Float64);
  Tensor prompt = tokens(2, 4, 15);
  Generator a(42), b(42), c(43), d(42);
  Tensor first = gpt->generate(prompt, 24, {.generator = &a});
  Tensor second = gpt->generate(prompt, 24, {.generator = &b});
  Tensor other_seed = gpt->generate(prompt, 24, {.generator = &c});
  Tensor uncached = gpt->generate(prompt, 24, {.use_kv_cache = false, .generator = &d});
  EXPECT_EQ(values_of(first), values_of(second));
  EXPECT_EQ(values_of(first), values_of(uncached));  // the same draws from the same probabilities
  EXPECT_NE(values_of(first), values_of(other_seed));
  // A nearly uniform model samples many different tokens, not the argmax.
  EXPECT_NE(values_of(first), values_of(gpt->generate(prompt, 24, {.temperature = 0.0})));
}

TEST(GPT, TopKOneAndTinyTemperatureAreGreedy) {
  auto gpt = small_gpt(16, DType::Float64);
  Tensor prompt = tokens(2, 4, 17);
  Tensor greedy = gpt->generate(prompt, 20, {.temperature = 0.0});
  Generator gen(1);
  EXPECT_EQ(values_of(gpt->generate(prompt, 20, {.temperature = 1.0, .top_k = 1, .generator = &gen})),
            values_of(greedy));
  EXPECT_EQ(values_of(gpt->generate(prompt, 20, {.temperature = 1e-9, .generator = &gen})), values_of(greedy));
}

TEST(GPT, TopKSamplesOnlyAmongTheKMostLikely) {
  auto gpt = small_gpt(18, DType::Float64);
  Tensor prompt = tokens(2, 3, 19);
  Generator gen(5);
  Tensor out = gpt->generate(prompt, 13, {.temperature = 2.0, .top_k = 3, .generator = &gen});
  NoGradGuard no_grad;
  gpt->eval();
  int outside_top1 = 0;
  for (int64_t len = 3; len < 16; ++len) {
    Tensor logits = gpt->forward(out.narrow(1, 0, len).contiguous()).select(1, len - 1);  // (B, V)
    std::vector<double> row_logits = values_of(logits);
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t token = out.select(0, b).select(0, len).item<int64_t>();
      int rank = 0;  // how many tokens are more likely
      for (int64_t v = 0; v < 65; ++v) rank += row_logits[b * 65 + v] > row_logits[b * 65 + token];
      EXPECT_LT(rank, 3) << "row " << b << " position " << len;
      outside_top1 += rank > 0;
    }
  }
  EXPECT_GT(outside_top1, 0);  // at temperature 2 it does not always pick the argmax
}

TEST(GPT, GenerationRestoresTheModeAndRecordsNoGraph) {
  auto gpt = small_gpt();
  gpt->train();
  Tensor prompt = tokens(1, 2, 20);
  Tensor out = gpt->generate(prompt, 3);
  EXPECT_TRUE(gpt->is_training());
  EXPECT_FALSE(out.requires_grad());
  EXPECT_EQ(out.dtype(), DType::Int64);
  EXPECT_EQ(values_of(gpt->generate(prompt, 0)), values_of(prompt));
}

// ---- training ----

TEST(GPT, DropoutActsOnlyInTraining) {
  manual_seed(21);
  GPTConfig c = small_config();
  c.dropout = 0.3;
  GPT gpt(c);
  Tensor x = tokens(2, 8, 22);
  gpt.train();
  EXPECT_NE(values_of(gpt.forward(x)), values_of(gpt.forward(x)));
  gpt.eval();
  EXPECT_EQ(values_of(gpt.forward(x)), values_of(gpt.forward(x)));
}

// Central differences of the loss, in float64, for a few elements of every
// parameter (the tied one included), against backward's gradient.
TEST(GPT, GradientsMatchFiniteDifferences) {
  auto gpt = small_gpt(23, DType::Float64);
  Tensor x = tokens(2, 6, 24), y = tokens(2, 6, 25);
  gpt->loss(x, y).backward();
  NoGradGuard no_grad;
  const double eps = 1e-6;
  for (const auto& [name, p] : gpt->named_parameters()) {
    Tensor flat = p.detach().reshape({-1});
    Tensor grad = p.grad().reshape({-1});
    for (int64_t i : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
      Tensor element = flat.narrow(0, i, 1);
      const double original = element.item<double>();
      fill_(element, original + eps);
      const double up = gpt->loss(x, y).item<double>();
      fill_(element, original - eps);
      const double down = gpt->loss(x, y).item<double>();
      fill_(element, original);
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grad.narrow(0, i, 1).item<double>(), numeric, 1e-7 + 1e-5 * std::fabs(numeric))
          << name << "[" << i << "]";
    }
  }
}

// Gradient descent memorises one repeated sequence (SGD written out here:
// the optimizers live above nn/).
TEST(GPT, OverfitsARepeatedSequence) {
  manual_seed(26);
  GPT gpt(GPTConfig{.vocab_size = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 32});
  Tensor seq = from_vector<int64_t>({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2}, {1, 17});
  Tensor x = cat({seq.narrow(1, 0, 8), seq.narrow(1, 8, 8)}, 0).contiguous();  // (2, 8)
  Tensor y = cat({seq.narrow(1, 1, 8), seq.narrow(1, 9, 8)}, 0).contiguous();
  const double first = gpt.loss(x, y).item<double>();
  double last = first;
  for (int step = 0; step < 300; ++step) {
    gpt.zero_grad();
    Tensor loss = gpt.loss(x, y);
    loss.backward();
    last = loss.item<double>();
    NoGradGuard no_grad;
    for (Tensor& p : gpt.parameters()) ops::sub_(p, ops::mul(p.grad(), 0.5));
  }
  EXPECT_NEAR(first, std::log(16.0), 0.05);
  EXPECT_LT(last, 0.1) << "from " << first;
}

#ifdef KILN_WITH_CUDA
TEST(GPT, CudaMatchesCpu) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  auto cpu = small_gpt(27, DType::Float64);
  auto gpu = small_gpt(27, DType::Float64);
  gpu->to(cuda_device(0));
  EXPECT_EQ(gpu->lm_head->weight.impl(), gpu->wte->weight.impl());
  Tensor x = tokens(2, 16, 28), y = tokens(2, 16, 29);
  Tensor loss_cpu = cpu->loss(x, y), loss_gpu = gpu->loss(x.to(cuda_device(0)), y.to(cuda_device(0)));
  EXPECT_NEAR(loss_gpu.item<double>(), loss_cpu.item<double>(), 1e-12);
  loss_cpu.backward();
  loss_gpu.backward();
  TensorDict grads_gpu = gpu->named_parameters();
  for (const auto& [name, p] : cpu->named_parameters()) {
    EXPECT_LT(max_abs_diff(grads_gpu.at(name).grad(), p.grad()), 1e-12) << name;
  }
  Tensor prompt = tokens(2, 3, 30);
  EXPECT_EQ(values_of(gpu->generate(prompt.to(cuda_device(0)), 20, {.temperature = 0.0})),
            values_of(cpu->generate(prompt, 20, {.temperature = 0.0})));
}
#endif

}  // namespace
}  // namespace kiln::nn
