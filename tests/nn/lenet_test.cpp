// LeNet-5: output shape, parameter names, shapes and count as the PyTorch
// module of scripts/lenet_torch.py, printing as torch prints it, and a
// forward/backward pass, and gradient descent steps that lower the loss.
#include "nn/models/lenet.h"

#include <gtest/gtest.h>

#include <sstream>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;

TEST(LeNet, OutputShape) {
  auto net = std::make_shared<LeNet>();
  EXPECT_EQ((*net)(kiln::randn({4, 3, 32, 32})).shape(), (Shape{4, 10}));
  EXPECT_EQ((*net)(kiln::randn({1, 3, 32, 32})).shape(), (Shape{1, 10}));
}

TEST(LeNet, ParameterNamesShapesAndCountMatchTorch) {
  auto net = std::make_shared<LeNet>();
  TensorDict params = net->named_parameters();
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"conv1.weight", {6, 3, 5, 5}}, {"conv1.bias", {6}}, {"conv2.weight", {16, 6, 5, 5}}, {"conv2.bias", {16}},
      {"fc1.weight", {120, 400}},     {"fc1.bias", {120}}, {"fc2.weight", {84, 120}},       {"fc2.bias", {84}},
      {"fc3.weight", {10, 84}},       {"fc3.bias", {10}},
  };
  ASSERT_EQ(params.size(), expected.size());
  int64_t count = 0;
  size_t i = 0;
  for (const auto& [name, tensor] : params) {
    EXPECT_EQ(name, expected[i].first);
    EXPECT_EQ(tensor.shape(), expected[i].second) << name;
    count += tensor.numel();
    ++i;
  }
  EXPECT_EQ(count, 62006);
  EXPECT_EQ(net->state_dict().keys(), params.keys());  // no buffers
}

TEST(LeNet, PrintsAsTorchPrintsItsTwin) {
  std::ostringstream os;
  os << LeNet();
  EXPECT_EQ(os.str(),
            "LeNet(\n"
            "  (conv1): Conv2d(3, 6, kernel_size=(5, 5), stride=(1, 1))\n"
            "  (pool): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
            "  (conv2): Conv2d(6, 16, kernel_size=(5, 5), stride=(1, 1))\n"
            "  (fc1): Linear(in_features=400, out_features=120, bias=True)\n"
            "  (fc2): Linear(in_features=120, out_features=84, bias=True)\n"
            "  (fc3): Linear(in_features=84, out_features=10, bias=True)\n"
            ")");
}

TEST(LeNet, BackwardReachesEveryParameter) {
  auto net = std::make_shared<LeNet>();
  Tensor x = kiln::randn({2, 3, 32, 32});
  Tensor loss = F::cross_entropy((*net)(x), from_vector<int64_t>({3, 7}, {2}));
  loss.backward();
  for (const auto& [name, p] : net->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
    double norm = 0;
    for (double v : testing::values_of(p.grad())) norm += v * v;
    EXPECT_GT(norm, 0.0) << name;
  }
}

// forward() pools before relu (see nn/models/lenet.cpp); this is the classic
// order, written out with the same modules, and both must agree exactly in
// values and in every parameter's gradient.
TEST(LeNet, PoolingBeforeReluIsTheClassicModelExactly) {
  auto net = std::make_shared<LeNet>();
  Tensor x = kiln::randn({4, 3, 32, 32});
  Tensor target = from_vector<int64_t>({3, 7, 0, 9}, {4});
  auto classic = [&] {
    Tensor h = (*net->pool)(F::relu((*net->conv1)(x)));
    h = (*net->pool)(F::relu((*net->conv2)(h)));
    h = F::relu((*net->fc1)(F::flatten(h, 1)));
    h = F::relu((*net->fc2)(h));
    return (*net->fc3)(h);
  };
  auto grads = [&] {
    std::vector<std::vector<double>> result;
    for (const auto& [name, p] : net->named_parameters()) {
      result.push_back(testing::values_of(p.grad()));
      p.set_grad(Tensor());
    }
    return result;
  };
  Tensor expected = classic();
  F::cross_entropy(expected, target).backward();
  auto expected_grads = grads();
  Tensor actual = (*net)(x);
  F::cross_entropy(actual, target).backward();
  auto actual_grads = grads();
  EXPECT_EQ(testing::values_of(actual), testing::values_of(expected));
  ASSERT_EQ(actual_grads.size(), expected_grads.size());
  for (size_t i = 0; i < actual_grads.size(); ++i) EXPECT_EQ(actual_grads[i], expected_grads[i]) << i;
}

// as_sequential(): the same modules in forward()'s order, so the same
// logits and parameter gradients bit for bit, the same state-dict keys and
// tensors, and the module names a pipeline split goes by.
TEST(LeNet, AsSequentialIsTheSameNetworkBitForBit) {
  auto net = std::make_shared<LeNet>();
  std::shared_ptr<Sequential> seq = net->as_sequential();
  std::vector<std::string> names;
  for (const auto& [name, module] : seq->named_children()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1", "pool1", "relu1", "conv2", "pool2", "relu2", "flatten", "fc1",
                                             "relu3", "fc2", "relu4", "fc3"}));
  EXPECT_EQ(seq->size(), 12u);
  EXPECT_EQ((*seq)[0].get(), net->conv1.get());
  EXPECT_EQ((*seq)[1].get(), net->pool.get());
  EXPECT_EQ(seq->state_dict().keys(), net->state_dict().keys());
  const TensorDict want = net->named_parameters(), got = seq->named_parameters();
  EXPECT_EQ(got.keys(), want.keys());
  for (const auto& [name, tensor] : want) EXPECT_EQ(got.at(name).impl(), tensor.impl()) << name;

  Tensor x = kiln::randn({5, 3, 32, 32});
  Tensor target = from_vector<int64_t>({3, 7, 0, 9, 1}, {5});
  auto grads = [&] {
    std::vector<std::vector<double>> result;
    for (const auto& [name, p] : net->named_parameters()) {
      result.push_back(testing::values_of(p.grad()));
      p.set_grad(Tensor());
    }
    return result;
  };
  Tensor expected = (*net)(x);
  F::cross_entropy(expected, target).backward();
  const auto expected_grads = grads();
  Tensor actual = (*seq)(x);
  F::cross_entropy(actual, target).backward();
  const auto actual_grads = grads();
  EXPECT_EQ(testing::values_of(actual), testing::values_of(expected));
  ASSERT_EQ(actual_grads.size(), 10u);
  for (size_t i = 0; i < actual_grads.size(); ++i) EXPECT_EQ(actual_grads[i], expected_grads[i]) << i;
  // A step through the Sequential's parameters trains the model itself.
  {
    NoGradGuard no_grad;
    Tensor bias = seq->named_parameters().at("fc3.bias");
    bias.copy_(full({10}, 0.25));
  }
  EXPECT_EQ(testing::values_of(net->fc3->bias), std::vector<double>(10, 0.25));
}

TEST(LeNet, GradientDescentLowersTheLossEveryStep) {
  // Small steps along the negative gradient must lower the loss each time,
  // which wrong gradients anywhere in the network would break.
  kiln::manual_seed(0);
  auto net = std::make_shared<LeNet>();
  Generator gen(1);
  Tensor x = kiln::randn({8, 3, 32, 32}, {}, &gen);
  Tensor y = kiln::randint(0, 10, {8}, DType::Int64, &gen);
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    net->zero_grad();
    Tensor loss = F::cross_entropy((*net)(x), y);
    loss.backward();
    losses.push_back(loss.item<double>());
    NoGradGuard no_grad;
    for (Tensor p : net->parameters()) ops::sub_(p, p.grad(), 0.03);
  }
  for (size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
  EXPECT_LT(losses.back(), losses.front() - 0.2);
}

TEST(LeNet, RejectsOtherImageSizes) {
  auto net = std::make_shared<LeNet>();
  testing::expect_error(
      [&] {
        (*net)(kiln::randn({2, 3, 28, 28}));
      },
      "LeNet: expected images of shape (N, 3, 32, 32), got [2, 3, 28, 28]");
}

}  // namespace
}  // namespace kiln::nn
