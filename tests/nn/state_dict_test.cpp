// Module::state_dict and load_state_dict: keys, sharing, strict and
// non-strict loading, and torch's error messages.
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

// fc: weight (out, in) and bias (out); norm: a running mean buffer, an
// integer counter and a non-persistent scratch buffer.
struct Fc : Module {
  Fc(int64_t in, int64_t out) {
    weight = register_parameter("weight", kiln::zeros({out, in}));
    bias = register_parameter("bias", kiln::zeros({out}));
  }
  Tensor weight;
  Tensor bias;
};

struct Norm : Module {
  explicit Norm(int64_t n) {
    running_mean = register_buffer("running_mean", kiln::zeros({n}));
    steps = register_buffer("steps", kiln::zeros({}, DType::Int64));
    scratch = register_buffer("scratch", kiln::zeros({n}), /*persistent=*/false);
  }
  Tensor running_mean;
  Tensor steps;
  Tensor scratch;
};

struct Net : Module {
  Net() {
    body = register_module("body", std::make_shared<Sequential>(std::make_shared<Fc>(3, 2), std::make_shared<Norm>(2)));
    fc = register_module("fc", std::make_shared<Fc>(2, 4));
  }
  std::shared_ptr<Sequential> body;
  std::shared_ptr<Fc> fc;
};

const std::vector<std::string> kNetKeys = {"body.0.weight", "body.0.bias", "body.1.running_mean", "body.1.steps",
                                           "fc.weight", "fc.bias"};

// Fills every tensor of the state dict with 1, 2, 3, ... in key order.
void fill_distinct(Module& m) {
  NoGradGuard no_grad;
  double next = 1.0;
  for (const auto& [key, t] : m.state_dict()) {
    Tensor target = t;
    Tensor values = kiln::arange(next, next + static_cast<double>(t.numel()), 1.0, DType::Float64).reshape(t.shape());
    target.copy_(values);
    next += static_cast<double>(t.numel());
  }
}

TEST(StateDict, KeysAreParametersAndPersistentBuffersByDottedName) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(net->state_dict().keys(), kNetKeys);
}

TEST(StateDict, ValuesShareMemoryAndCarryNoGradient) {
  auto net = std::make_shared<Net>();
  TensorDict state = net->state_dict();
  const Tensor& w = state.at("fc.weight");
  EXPECT_FALSE(w.is_same(net->fc->weight));
  EXPECT_EQ(w.data_ptr(), net->fc->weight.data_ptr());
  EXPECT_FALSE(w.requires_grad());
  EXPECT_TRUE(net->fc->weight.requires_grad());
  {
    NoGradGuard no_grad;
    kiln::fill_(net->fc->weight, 3.0);
  }
  EXPECT_EQ(values_of(w), std::vector<double>(8, 3.0));
}

TEST(StateDict, RoundTripCopiesInPlace) {
  auto source = std::make_shared<Net>();
  fill_distinct(*source);
  auto target = std::make_shared<Net>();
  void* weight_data = target->fc->weight.data_ptr();
  IncompatibleKeys result = target->load_state_dict(source->state_dict());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  TensorDict loaded = target->state_dict();
  for (const auto& [key, t] : source->state_dict()) {
    EXPECT_EQ(values_of(loaded.at(key)), values_of(t)) << key;
    EXPECT_NE(loaded.at(key).data_ptr(), t.data_ptr()) << key;  // copied, not aliased
  }
  // In place: the members (and an optimizer holding them) see the values.
  EXPECT_EQ(target->fc->weight.data_ptr(), weight_data);
  EXPECT_EQ(values_of(target->fc->bias), (std::vector<double>{20, 21, 22, 23}));
  EXPECT_EQ(target->body->at<Norm>(1)->steps.item<int64_t>(), 11);
  EXPECT_TRUE(target->fc->weight.requires_grad());
}

TEST(StateDict, LoadConvertsDType) {
  auto net = std::make_shared<Net>();
  TensorDict state;
  for (const auto& [key, t] : net->state_dict()) state.insert(key, kiln::full(t.shape(), 1.5, DType::Float64));
  net->load_state_dict(state);
  EXPECT_EQ(net->fc->weight.dtype(), DType::Float32);
  EXPECT_EQ(values_of(net->fc->weight), std::vector<double>(8, 1.5));
  EXPECT_EQ(net->body->at<Norm>(1)->steps.item<int64_t>(), 1);  // 1.5 into int64, as torch's copy_
}

TEST(StateDict, StrictLoadReportsEveryProblemAndCopiesNothing) {
  auto net = std::make_shared<Net>();
  TensorDict state;
  state.insert("body.0.weight", kiln::ones({2, 4}));   // model: [2, 3]
  state.insert("body.0.bias", kiln::full({2}, 9.0));   // fine, but must not be copied
  state.insert("body.1.running_mean", kiln::ones({3}));  // model: [2]
  state.insert("fc.extra", kiln::ones({1}));
  state.insert("body.1.scratch", kiln::ones({2}));     // non-persistent: not expected
  try {
    net->load_state_dict(state);
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "Error(s) in loading state_dict for Net:\n"
              "\tMissing key(s) in state_dict: \"body.1.steps\", \"fc.weight\", \"fc.bias\".\n"
              "\tUnexpected key(s) in state_dict: \"fc.extra\", \"body.1.scratch\".\n"
              "\tsize mismatch for body.0.weight: copying a param with shape [2, 4] from checkpoint, the shape in "
              "current model is [2, 3].\n"
              "\tsize mismatch for body.1.running_mean: copying a param with shape [3] from checkpoint, the shape "
              "in current model is [2].");
  }
  EXPECT_EQ(values_of(net->get_parameter("body.0.bias")), (std::vector<double>{0, 0}));
}

TEST(StateDict, NonStrictLoadReturnsTheKeysAndCopiesTheRest) {
  auto net = std::make_shared<Net>();
  TensorDict state;
  state.insert("fc.bias", kiln::full({4}, 2.0));
  state.insert("head.weight", kiln::ones({1}));
  IncompatibleKeys result = net->load_state_dict(state, /*strict=*/false);
  EXPECT_EQ(result.missing_keys,
            (std::vector<std::string>{"body.0.weight", "body.0.bias", "body.1.running_mean", "body.1.steps",
                                      "fc.weight"}));
  EXPECT_EQ(result.unexpected_keys, std::vector<std::string>{"head.weight"});
  EXPECT_EQ(values_of(net->fc->bias), std::vector<double>(4, 2.0));
}

TEST(StateDict, NonStrictLoadStillRejectsShapeMismatches) {
  auto net = std::make_shared<Net>();
  TensorDict state;
  state.insert("fc.weight", kiln::ones({4, 3}));
  state.insert("fc.bias", kiln::full({4}, 2.0));
  expect_error([&] { net->load_state_dict(state, /*strict=*/false); },
               "Error(s) in loading state_dict for Net:\n\tsize mismatch for fc.weight: copying a param with shape "
               "[4, 3] from checkpoint, the shape in current model is [4, 2].");
  EXPECT_EQ(values_of(net->fc->bias), std::vector<double>(4, 0.0));
}

TEST(StateDict, AbsentParametersAreNeitherSavedNorExpected) {
  Module m("NoBias");
  m.register_parameter("weight", kiln::ones({2}));
  m.register_parameter("bias", Tensor());
  EXPECT_EQ(m.state_dict().keys(), std::vector<std::string>{"weight"});
  TensorDict state;
  state.insert("weight", kiln::full({2}, 4.0));
  EXPECT_TRUE(m.load_state_dict(state).missing_keys.empty());
}

}  // namespace
}  // namespace kiln::nn
