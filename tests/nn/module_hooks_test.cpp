// Modules of several tensors (Note [Modules of several tensors]), their
// forward hooks, the full backward hooks (Note [Module backward hooks]) and
// the state-dict hooks. The one-tensor forward hooks are tested in
// module_test.cpp.
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/container.h"
#include "nn/module.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

using testing::expect_error;
using testing::values_of;

// y = x * weight: one tensor in, one out.
struct Scale : Module {
  explicit Scale(double w) { weight = register_parameter("weight", kiln::full({1}, w)); }
  Tensor forward(const Tensor& x) override { return kiln::mul(x, weight); }
  Tensor weight;
};

// (x, mask) -> x * mask * weight: two tensors in, one out, as attention with a mask.
struct Masked : Module {
  Masked() { weight = register_parameter("weight", kiln::full({1}, 3.0)); }
  TensorList forward_many(const TensorList& in) override {
    KILN_CHECK(in.size() == 2, "Masked: takes (x, mask), got ", in.size(), " tensors");
    return {kiln::mul(kiln::mul(in[0], in[1]), weight)};
  }
  Tensor weight;
};

// x -> (x * weight, bias): one in, two out, as a tensor-parallel layer that
// leaves the bias to its caller.
struct WithBias : Module {
  WithBias() {
    weight = register_parameter("weight", kiln::full({1}, 2.0));
    bias = register_parameter("bias", kiln::full({1}, 0.5));
  }
  Tensor forward(const Tensor& x) override { return forward_many({x})[0]; }
  TensorList forward_many(const TensorList& in) override { return {kiln::mul(in[0], weight), bias}; }
  Tensor weight, bias;
};

// (y, bias) -> y + bias.
struct AddPair : Module {
  TensorList forward_many(const TensorList& in) override { return {kiln::add(in[0], in[1])}; }
};

// ---- several tensors in and out ----

TEST(ModuleOfSeveralTensors, TakesAListAndReturnsAList) {
  auto masked = std::make_shared<Masked>();
  TensorList out = (*masked)({kiln::full({2}, 5.0), kiln::from_vector<double>({1.0, 0.0}, {2}).to(DType::Float32)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{15, 0}));
  // One tensor goes through forward_many, which refuses it by name.
  expect_error([&] { (*masked)(kiln::ones({2})); }, "Masked: takes (x, mask), got 1 tensors");

  auto with_bias = std::make_shared<WithBias>();
  TensorList pair = (*with_bias)(TensorList{kiln::full({1}, 4.0)});
  ASSERT_EQ(pair.size(), 2u);
  EXPECT_EQ(values_of(pair[0]), std::vector<double>{8});
  EXPECT_EQ(values_of(pair[1]), std::vector<double>{0.5});
}

TEST(ModuleOfSeveralTensors, OneTensorCallsRefuseSeveralOutputsAndInputs) {
  struct TwoOut : Module {
    TensorList forward_many(const TensorList& in) override { return {in[0], in[0]}; }
  };
  auto two = std::make_shared<TwoOut>();
  expect_error([&] { (*two)(kiln::ones({1})); }, "TwoOut: returned 2 tensors; call it with a TensorList");
  // An existing one-tensor layer called with two inputs says what to do.
  auto scale = std::make_shared<Scale>(2.0);
  expect_error([&] { (*scale)({kiln::ones({1}), kiln::ones({1})}); },
               "Scale: forward takes one tensor but was given 2; a module of several inputs overrides forward_many");
  // ...and is unchanged with one, in either form.
  EXPECT_EQ(values_of((*scale)(kiln::full({1}, 3.0))), std::vector<double>{6});
  EXPECT_EQ(values_of((*scale)(TensorList{kiln::full({1}, 3.0)})[0]), std::vector<double>{6});
}

TEST(ModuleOfSeveralTensors, SequentialChainsThem) {
  // x -> (2x, 0.5) -> 2x + 0.5 -> (2x + 0.5) * mask * 3: needs the mask, so it
  // goes in a list with a pass-through first stage.
  struct KeepMask : Module {
    std::shared_ptr<Module> inner;
    explicit KeepMask(std::shared_ptr<Module> m) : inner(register_module("inner", std::move(m))) {}
    TensorList forward_many(const TensorList& in) override {
      TensorList out = (*inner)(TensorList{in[0]});
      out.push_back(in[1]);
      return out;
    }
  };
  auto block = std::make_shared<Sequential>(std::make_shared<WithBias>(), std::make_shared<AddPair>());
  Tensor x = kiln::full({2}, 1.0).requires_grad_();
  // (1 * 2) + 0.5
  Tensor y = (*block)(x);
  EXPECT_EQ(values_of(y), (std::vector<double>{2.5, 2.5}));
  kiln::sum(y).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{2, 2}));
  EXPECT_EQ(values_of(std::static_pointer_cast<WithBias>((*block)[0])->bias.grad()), std::vector<double>{2});

  auto masked_block = std::make_shared<Sequential>(std::make_shared<KeepMask>(block), std::make_shared<Masked>());
  TensorList out = (*masked_block)({kiln::full({2}, 1.0), kiln::from_vector<double>({1.0, 0.0}, {2}).to(DType::Float32)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{7.5, 0}));
  // A Sequential whose last module returns two cannot be called for one.
  auto open_pair = std::make_shared<Sequential>(std::make_shared<WithBias>());
  expect_error([&] { (*open_pair)(kiln::ones({1})); }, "returned 2 tensors");
  EXPECT_EQ((*open_pair)(TensorList{kiln::ones({1})}).size(), 2u);
}

TEST(ModuleOfSeveralTensors, ForwardHooksSeeAndReplaceEveryTensor) {
  auto masked = std::make_shared<Masked>();
  TensorList seen_in, seen_out;
  masked->register_forward_pre_hook([](Module&, const TensorList& in) {
    // A causal mask in place of the caller's: replaces the second input.
    return TensorList{in[0], kiln::ones({2})};
  });
  masked->register_forward_hook([&](Module&, const TensorList& in, const TensorList& out) {
    seen_in = in;
    seen_out = out;
  });
  masked->register_forward_hook(
      [](Module&, const TensorList&, const TensorList& out) -> std::optional<TensorList> {
        return TensorList{kiln::add(out[0], 1.0)};
      });
  TensorList out = (*masked)({kiln::full({2}, 5.0), kiln::zeros({2})});
  ASSERT_EQ(seen_in.size(), 2u);
  EXPECT_EQ(values_of(seen_in[1]), (std::vector<double>{1, 1}));  // what forward saw
  EXPECT_EQ(values_of(seen_out[0]), (std::vector<double>{15, 15}));
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{16, 16}));

  // A hook written for one tensor refuses a call of two, naming the module.
  masked->register_forward_pre_hook([](Module&, const Tensor&) {});
  expect_error([&] { (*masked)({kiln::ones({2}), kiln::ones({2})}); },
               "Masked: a forward pre-hook written for one tensor cannot take the 2 inputs of this call");
}

// ---- backward hooks ----

TEST(ModuleBackwardHooks, SeeTheGradientsOfEveryInputAndOutput) {
  // out = x * mask * 3; d out / dx = mask * 3, d out / d mask = x * 3.
  auto masked = std::make_shared<Masked>();
  std::vector<std::string> events;
  TensorList grad_in, grad_out_pre, grad_out;
  masked->register_full_backward_pre_hook([&](Module& m, const TensorList& g) {
    events.push_back("pre " + m.name());
    grad_out_pre = g;
  });
  masked->register_full_backward_hook([&](Module&, const TensorList& gi, const TensorList& go) {
    events.push_back("post");
    grad_in = gi;
    grad_out = go;
  });
  Tensor x = kiln::full({2}, 2.0).requires_grad_();
  Tensor mask = kiln::from_vector<double>({1.0, 0.0}, {2}).to(DType::Float32);  // needs no grad
  TensorList out = (*masked)({x, mask});
  EXPECT_TRUE(events.empty());  // nothing at forward
  kiln::sum(kiln::mul(out[0], 10.0)).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"pre Masked", "post"}));
  ASSERT_EQ(grad_out_pre.size(), 1u);
  EXPECT_EQ(values_of(grad_out_pre[0]), (std::vector<double>{10, 10}));
  EXPECT_EQ(values_of(grad_out[0]), (std::vector<double>{10, 10}));
  ASSERT_EQ(grad_in.size(), 2u);
  EXPECT_EQ(values_of(grad_in[0]), (std::vector<double>{30, 0}));
  EXPECT_FALSE(grad_in[1].defined());  // the mask needs no gradient
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{30, 0}));
  // The weight's gradient went through the module, untouched by the hooks.
  EXPECT_EQ(values_of(masked->weight.grad()), std::vector<double>{20});
}

TEST(ModuleBackwardHooks, MayReplaceTheGradients) {
  auto scale = std::make_shared<Scale>(3.0);  // y = 3x
  scale->register_full_backward_pre_hook(
      [](Module&, const TensorList& g) { return TensorList{kiln::mul(g[0], 2.0)}; });
  scale->register_full_backward_hook([](Module&, const TensorList& gi, const TensorList&) -> std::optional<TensorList> {
    return TensorList{kiln::add(gi[0], 1.0)};
  });
  Tensor x = kiln::full({1}, 5.0).requires_grad_();
  kiln::sum((*scale)(x)).backward();
  // The output's gradient doubled to 2 reaches the weight (2 * x = 10) and
  // the input (2 * 3 = 6), whose gradient the hook raises to 7.
  EXPECT_EQ(values_of(scale->weight.grad()), std::vector<double>{10});
  EXPECT_EQ(values_of(x.grad()), std::vector<double>{7});

  auto wrong = std::make_shared<Scale>(1.0);
  wrong->register_full_backward_pre_hook([](Module&, const TensorList& g) { return TensorList{g[0], g[0]}; });
  Tensor y = (*wrong)(kiln::ones({1}).requires_grad_());
  expect_error([&] { kiln::sum(y).backward(); }, "Scale: a backward pre-hook returned 2 gradients for 1");
}

TEST(ModuleBackwardHooks, FireWhenNoInputNeedsAGradientAndCanBeRemoved) {
  // The first layer of a network: its input needs no gradient, its weight
  // does. The hook still runs, with an undefined input gradient, once the
  // gradient of the output is known.
  auto scale = std::make_shared<Scale>(3.0);
  int runs = 0;
  TensorList grad_in;
  HookHandle handle = scale->register_full_backward_hook([&](Module&, const TensorList& gi, const TensorList&) {
    ++runs;
    grad_in = gi;
  });
  kiln::sum((*scale)(kiln::ones({1}))).backward();
  EXPECT_EQ(runs, 1);
  ASSERT_EQ(grad_in.size(), 1u);
  EXPECT_FALSE(grad_in[0].defined());
  handle.remove();
  kiln::sum((*scale)(kiln::ones({1}))).backward();
  EXPECT_EQ(runs, 1);

  // Without backward hooks, a call records nothing but the module's own ops.
  Tensor y = (*scale)(kiln::ones({1}).requires_grad_());
  EXPECT_EQ(y.grad_fn_name(), "MulBackward");
}

// ---- state-dict hooks ----

struct Outer : Module {
  Outer() {
    inner = register_module("inner", std::make_shared<Scale>(2.0));
    gain = register_parameter("gain", kiln::ones({1}));
  }
  std::shared_ptr<Scale> inner;
  Tensor gain;
};

TEST(ModuleStateDictHooks, RewriteKeysAndTensorsOnSaveAndLoad) {
  auto net = std::make_shared<Outer>();
  std::vector<std::string> events;
  net->inner->register_state_dict_pre_hook(
      [&](const Module& m, const std::string& prefix) { events.push_back("pre " + m.name() + " '" + prefix + "'"); });
  // A sharded layout: the inner module's keys get a "shard." prefix and its
  // tensors are stored doubled.
  net->inner->register_state_dict_hook([&](const Module&, TensorDict& state, const std::string& prefix) {
    events.push_back("post '" + prefix + "'");
    TensorDict rewritten;
    for (const auto& [key, t] : state) {
      if (key.rfind(prefix, 0) == 0) {
        rewritten.insert("shard." + key, kiln::mul(t, 2.0));
      } else {
        rewritten.insert(key, t);
      }
    }
    state = rewritten;
  });
  TensorDict saved = net->state_dict();
  EXPECT_EQ(events, (std::vector<std::string>{"pre Scale 'inner.'", "post 'inner.'"}));
  EXPECT_EQ(saved.keys(), (std::vector<std::string>{"gain", "shard.inner.weight"}));
  EXPECT_EQ(values_of(saved.at("shard.inner.weight")), std::vector<double>{4});

  // Without a load pre hook the layout does not load...
  auto other = std::make_shared<Outer>();
  expect_error([&] { other->load_state_dict(saved); }, "Missing key(s) in state_dict: \"inner.weight\"");
  // ...with one that undoes it, it does, and a post hook sees the result.
  other->inner->register_load_state_dict_pre_hook([](Module&, TensorDict& state, const std::string& prefix) {
    TensorDict rewritten;
    for (const auto& [key, t] : state) {
      if (key.rfind("shard." + prefix, 0) == 0) {
        rewritten.insert(key.substr(6), kiln::mul(t, 0.5));
      } else {
        rewritten.insert(key, t);
      }
    }
    state = rewritten;
  });
  int post_runs = 0;
  other->register_load_state_dict_post_hook([&](Module&, IncompatibleKeys& keys) {
    ++post_runs;
    EXPECT_TRUE(keys.missing_keys.empty());
    keys.unexpected_keys.push_back("noted by the hook");
  });
  {
    NoGradGuard no_grad;
    other->inner->weight.copy_(kiln::zeros({1}));
  }
  IncompatibleKeys result = other->load_state_dict(saved);
  EXPECT_EQ(post_runs, 1);
  EXPECT_EQ(values_of(other->inner->weight), std::vector<double>{2});
  EXPECT_EQ(result.unexpected_keys, (std::vector<std::string>{"noted by the hook"}));
}

}  // namespace
}  // namespace kiln::nn
