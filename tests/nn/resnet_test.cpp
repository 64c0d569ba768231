// The CIFAR ResNet (nn/models/resnet.h): shapes, the exact parameter count,
// module and state-dict names as scripts/resnet20_torch.py, outputs and
// BatchNorm statistics against that PyTorch twin on the same float64
// weights, gradients of a BasicBlock (with and without its downsample
// shortcut) by finite differences, swapped submodules taking effect (Note
// [ResNet submodules by name]), training steps that lower the loss, the
// nn::Add module, and the errors.
#include "nn/models/resnet.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/functional_modules.h"
#include "nn/linear.h"
#include "nn/nn_test_util.h"
#include "nn/normalization.h"
#include "nn/pooling.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must point at the source tree (tests/CMakeLists.txt sets it)"
#endif

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using resnet::BasicBlock;

const std::vector<std::string> kBatchNormEntries = {"weight", "bias", "running_mean", "running_var",
                                                    "num_batches_tracked"};

// ResNet-20's state-dict keys in torch's order, written out from the
// definition in scripts/resnet20_torch.py.
std::vector<std::string> expected_state_dict_keys() {
  std::vector<std::string> keys;
  auto conv = [&](const std::string& name) { keys.push_back(name + ".weight"); };
  auto bn = [&](const std::string& name) {
    for (const std::string& entry : kBatchNormEntries) keys.push_back(name + "." + entry);
  };
  conv("conv1");
  bn("bn1");
  for (int stage = 1; stage <= 3; ++stage) {
    for (int b = 0; b < 3; ++b) {
      const std::string block = "layer" + std::to_string(stage) + "." + std::to_string(b);
      conv(block + ".conv1");
      bn(block + ".bn1");
      conv(block + ".conv2");
      bn(block + ".bn2");
      if (stage > 1 && b == 0) {
        conv(block + ".downsample.0");
        bn(block + ".downsample.1");
      }
    }
  }
  keys.push_back("fc.weight");
  keys.push_back("fc.bias");
  return keys;
}

// The type of every module by name, as quantization sees them.
std::vector<std::pair<std::string, std::string>> module_types(Module& net) {
  std::vector<std::pair<std::string, std::string>> types;
  for (const auto& [name, module] : net.named_modules("", false)) types.emplace_back(name, module->name());
  return types;
}

TEST(CifarResNet, OutputShapeForOneAndSeveralImages) {
  auto net = std::make_shared<CifarResNet>();
  EXPECT_EQ((*net)(kiln::randn({1, 3, 32, 32})).shape(), (Shape{1, 10}));
  EXPECT_EQ((*net)(kiln::randn({5, 3, 32, 32})).shape(), (Shape{5, 10}));
  net->eval();
  EXPECT_EQ((*net)(kiln::randn({1, 3, 32, 32})).shape(), (Shape{1, 10}));
  // The pooling is adaptive: other image sizes run too.
  EXPECT_EQ((*net)(kiln::randn({2, 3, 20, 20})).shape(), (Shape{2, 10}));
}

TEST(CifarResNet, ResNet20HasTheExactParameterCountAndTorchsStateDictKeys) {
  auto net = std::make_shared<CifarResNet>(20);
  int64_t count = 0;
  for (const Tensor& p : net->parameters()) count += p.numel();
  EXPECT_EQ(count, 272474);  // option A's 269,722 and 2 x (1x1 conv + BatchNorm): 576 + 2,176
  EXPECT_EQ(net->state_dict().keys(), expected_state_dict_keys());
  EXPECT_EQ(net->get_parameter("layer2.0.downsample.0.weight").shape(), (Shape{32, 16, 1, 1}));
  EXPECT_EQ(net->get_parameter("layer3.0.conv1.weight").shape(), (Shape{64, 32, 3, 3}));
  EXPECT_EQ(net->get_parameter("fc.weight").shape(), (Shape{10, 64}));
  EXPECT_FALSE(net->get_parameter("conv1.bias").defined());  // convolutions followed by BN have no bias
}

TEST(CifarResNet, EveryActivationAndResidualAddIsItsOwnNamedModule) {
  auto net = std::make_shared<CifarResNet>();
  std::vector<std::pair<std::string, std::string>> expected = {
      {"conv1", "Conv2d"}, {"bn1", "BatchNorm2d"}, {"relu", "ReLU"}};
  for (int stage = 1; stage <= 3; ++stage) {
    expected.emplace_back("layer" + std::to_string(stage), "Sequential");
    for (int b = 0; b < 3; ++b) {
      const std::string block = "layer" + std::to_string(stage) + "." + std::to_string(b);
      expected.emplace_back(block, "BasicBlock");
      for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
               {"conv1", "Conv2d"}, {"bn1", "BatchNorm2d"}, {"relu1", "ReLU"}, {"conv2", "Conv2d"},
               {"bn2", "BatchNorm2d"}}) {
        expected.emplace_back(block + "." + name, type);
      }
      if (stage > 1 && b == 0) {
        expected.emplace_back(block + ".downsample", "Sequential");
        expected.emplace_back(block + ".downsample.0", "Conv2d");
        expected.emplace_back(block + ".downsample.1", "BatchNorm2d");
      }
      expected.emplace_back(block + ".add", "Add");
      expected.emplace_back(block + ".relu2", "ReLU");
    }
  }
  expected.emplace_back("avgpool", "AdaptiveAvgPool2d");
  expected.emplace_back("fc", "Linear");
  EXPECT_EQ(module_types(*net), expected);
  // One ReLU instance per use: none is shared.
  EXPECT_NE(net->get_submodule("layer1.0.relu1"), net->get_submodule("layer1.0.relu2"));
  auto down = std::dynamic_pointer_cast<Conv2d>(net->get_submodule("layer3.0.downsample.0"));
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->params.stride.h, 2);
  EXPECT_EQ(down->params.stride.w, 2);
  EXPECT_FALSE(down->bias.defined());
}

TEST(CifarResNet, DeeperVariantsHaveSixNPlusTwoLayers) {
  auto net = std::make_shared<CifarResNet>(32, 100);
  EXPECT_EQ(net->blocks_per_stage, 5);
  EXPECT_NO_THROW(net->get_submodule("layer3.4.relu2"));
  EXPECT_EQ((*net)(kiln::randn({2, 3, 32, 32})).shape(), (Shape{2, 100}));
}

TEST(CifarResNet, ConvolutionsAreKaimingNormalFanOut) {
  // torchvision's init: std = sqrt(2 / (out_channels * kh * kw)); BatchNorm 1 and 0.
  kiln::manual_seed(3);
  auto net = std::make_shared<CifarResNet>();
  Tensor w = net->get_parameter("layer3.1.conv2.weight");  // (64, 64, 3, 3): 36,864 draws
  const std::vector<double> v = testing::values_of(w);
  double mean = 0, square = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) square += (x - mean) * (x - mean) / static_cast<double>(v.size());
  const double expected_std = std::sqrt(2.0 / (64 * 9));
  EXPECT_NEAR(mean, 0.0, 4 * expected_std / std::sqrt(static_cast<double>(v.size())));
  EXPECT_NEAR(std::sqrt(square), expected_std, 0.02 * expected_std);
  EXPECT_EQ(testing::values_of(net->get_parameter("layer1.0.bn2.weight")), std::vector<double>(16, 1.0));
  EXPECT_EQ(testing::values_of(net->get_parameter("layer1.0.bn2.bias")), std::vector<double>(16, 0.0));
}

// ---- against PyTorch ----

bool torch_available() {
  static const bool available = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  return available;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/kiln_resnet_" + std::to_string(getpid()) + "_" + name;
}

TEST(CifarResNet, MatchesPyTorchOnTheSameFloat64Weights) {
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch; the PyTorch parity test is skipped";
  kiln::manual_seed(5);
  auto net = std::make_shared<CifarResNet>();
  net->to(DType::Float64);
  {
    // BatchNorm weights and running statistics away from 1 and 0, so that
    // every one of them matters to the outputs.
    NoGradGuard no_grad;
    Generator gen(6);
    for (const auto& [name, entry] : net->state_dict()) {
      Tensor t = entry;  // shares the module's memory
      const bool batch_norm_weight = name.ends_with(".weight") && t.dim() == 1;
      if (batch_norm_weight || name.ends_with("running_var")) t.copy_(kiln::rand(t.shape(), DType::Float64, &gen) + 0.5);
      if (name.ends_with(".bias") || name.ends_with("running_mean")) {
        t.copy_(kiln::randn(t.shape(), DType::Float64, &gen) * 0.1);
      }
    }
  }
  const std::string weights = temp_path("weights.safetensors"), in = temp_path("x.safetensors"),
                    out = temp_path("out.safetensors");
  save_safetensors(weights, net->state_dict());
  Generator gen(7);
  Tensor x = kiln::randn({4, 3, 32, 32}, DType::Float64, &gen);
  save_safetensors(in, {{"x", x}});
  const std::string cmd = std::string("/usr/bin/python3 ") + KILN_SOURCE_DIR + "/scripts/resnet20_torch.py outputs " +
                          weights + " " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  TensorDict torch = load_safetensors(out);

  Tensor eval_logits, train_logits;
  {
    NoGradGuard no_grad;
    net->eval();
    eval_logits = (*net)(x);  // running statistics
    net->train();
    train_logits = (*net)(x);  // batch statistics, and the running ones updated
  }
  EXPECT_TRUE(allclose(eval_logits, torch.at("eval"), 1e-10, 1e-10)) << eval_logits << "\n" << torch.at("eval");
  EXPECT_TRUE(allclose(train_logits, torch.at("train"), 1e-10, 1e-10)) << train_logits << "\n"
                                                                        << torch.at("train");
  for (const auto& [name, t] : net->state_dict()) {
    const Tensor theirs = torch.at("after." + name);
    EXPECT_EQ(testing::values_of(t).size(), testing::values_of(theirs).size()) << name;
    EXPECT_TRUE(allclose(t.to(DType::Float64), theirs.to(DType::Float64), 1e-10, 1e-12)) << name;
  }
  for (const std::string& path : {weights, in, out}) std::remove(path.c_str());
}

// ---- gradients ----

// Checks the gradient of sum(block(x) * g) with respect to every element
// of every parameter of `block` against central differences.
void expect_parameter_gradients_match_finite_differences(Module& block, const Tensor& x) {
  Generator gen(9);
  Tensor g = kiln::randn(block(x).shape(), DType::Float64, &gen);
  auto loss = [&] { return kiln::sum(kiln::mul(block(x), g)); };
  block.zero_grad();
  loss().backward();
  const double eps = 1e-6;
  for (const auto& [name, p] : block.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::vector<double> analytic = testing::values_of(p.grad());
    NoGradGuard no_grad;
    double* data = p.data<double>();
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double saved = data[i];
      data[i] = saved + eps;
      const double plus = loss().item<double>();
      data[i] = saved - eps;
      const double minus = loss().item<double>();
      data[i] = saved;
      const double numerical = (plus - minus) / (2 * eps);
      ASSERT_NEAR(analytic[static_cast<size_t>(i)], numerical, 1e-5 + 1e-3 * std::abs(numerical))
          << name << " element " << i;
    }
  }
}

TEST(BasicBlockGradients, DownsamplingBlockPassesGradcheckInTrainingAndEval) {
  kiln::manual_seed(11);
  auto block = std::make_shared<BasicBlock>(3, 4, 2);
  ASSERT_TRUE(block->has_downsample);
  block->to(DType::Float64);
  Generator gen(12);
  Tensor x = kiln::randn({2, 3, 5, 5}, DType::Float64, &gen).requires_grad_();  // odd size: (N, 4, 3, 3)
  EXPECT_EQ((*block)(x).shape(), (Shape{2, 4, 3, 3}));
  auto fn = [&](const TensorList& in) { return TensorList{(*block)(in[0])}; };
  EXPECT_NO_THROW(autograd::gradcheck(fn, {x}));  // batch statistics
  expect_parameter_gradients_match_finite_differences(*block, x);
  block->eval();
  EXPECT_NO_THROW(autograd::gradcheck(fn, {x}));  // running statistics
  expect_parameter_gradients_match_finite_differences(*block, x);
}

TEST(BasicBlockGradients, IdentityBlockPassesGradcheck) {
  kiln::manual_seed(13);
  auto block = std::make_shared<BasicBlock>(4, 4, 1);
  ASSERT_FALSE(block->has_downsample);
  EXPECT_THROW(block->get_submodule("downsample"), Error);
  block->to(DType::Float64);
  Generator gen(14);
  Tensor x = kiln::randn({3, 4, 4, 4}, DType::Float64, &gen).requires_grad_();
  EXPECT_NO_THROW(autograd::gradcheck([&](const TensorList& in) { return TensorList{(*block)(in[0])}; }, {x}));
  expect_parameter_gradients_match_finite_differences(*block, x);
}

// ---- swapping submodules (Note [ResNet submodules by name]) ----

class CountingAdd : public Add {
 public:
  explicit CountingAdd(int* calls) : calls_(calls) {}
  TensorList forward_many(const TensorList& inputs) override {
    ++*calls_;
    return Add::forward_many(inputs);
  }

 private:
  int* calls_;
};

TEST(CifarResNet, ReplacedSubmodulesAreTheOnesThatRun) {
  auto net = std::make_shared<CifarResNet>();
  net->eval();
  Tensor x = kiln::randn({2, 3, 32, 32});
  int adds = 0;
  for (const auto& [name, module] : net->named_modules()) {
    if (module->name() == "BasicBlock") module->replace_module("add", std::make_shared<CountingAdd>(&adds));
  }
  Tensor before = (*net)(x);
  EXPECT_EQ(adds, 9);
  // The stem's BatchNorm and ReLU replaced by Identity: the output changes,
  // and equals the model run by hand with the stem's conv alone.
  net->replace_module("bn1", std::make_shared<Identity>());
  net->replace_module("relu", std::make_shared<Identity>());
  net->replace_module("fc", std::make_shared<Linear>(64, 3));
  Tensor after = (*net)(x);
  EXPECT_EQ(after.shape(), (Shape{2, 3}));
  Tensor h = (*net->get_submodule("conv1"))(x);
  for (const char* block : {"layer1", "layer2", "layer3"}) h = (*net->get_submodule(block))(h);
  Tensor by_hand = (*net->get_submodule("fc"))(F::flatten(F::adaptive_avg_pool2d(h, 1), 1));
  EXPECT_EQ(testing::values_of(after), testing::values_of(by_hand));
  EXPECT_EQ(adds, 9 + 18);
}

// ---- training ----

TEST(CifarResNet, GradientStepsLowerTheLossOnATinyBatch) {
  kiln::manual_seed(0);
  auto net = std::make_shared<CifarResNet>();
  Generator gen(1);
  Tensor x = kiln::randn({8, 3, 32, 32}, {}, &gen);
  Tensor y = kiln::randint(0, 10, {8}, DType::Int64, &gen);
  std::vector<double> losses;
  std::vector<Tensor> velocity;
  for (const Tensor& p : net->parameters()) velocity.push_back(kiln::zeros_like(p));
  for (int step = 0; step < 12; ++step) {
    net->zero_grad();
    Tensor loss = F::cross_entropy((*net)(x), y);
    loss.backward();
    losses.push_back(loss.item<double>());
    NoGradGuard no_grad;
    // SGD with momentum 0.9 and lr 0.05, written out.
    std::vector<Tensor> params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      ops::mul_(velocity[i], 0.9);
      ops::add_(velocity[i], params[i].grad());
      ops::sub_(params[i], velocity[i], 0.05);
    }
  }
  for (const auto& [name, p] : net->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << ", last " << losses.back();
  EXPECT_EQ(net->get_buffer("layer3.2.bn2.num_batches_tracked").item<int64_t>(), 12);
}

// ---- nn::Add ----

TEST(AddModule, AddsTwoTensorsThroughHooksWithGradients) {
  auto add = std::make_shared<Add>();
  Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor b = from_vector<double>({10, 20}, {2}).requires_grad_();  // broadcast as kiln::add
  size_t seen_inputs = 0;
  add->register_forward_hook([&](Module&, const TensorList& in, const TensorList& out) {
    seen_inputs = in.size();
    EXPECT_EQ(out.size(), 1u);
  });
  Tensor y = (*add)(a, b);
  EXPECT_EQ(seen_inputs, 2u);
  EXPECT_EQ(testing::values_of(y), (std::vector<double>{11, 22, 13, 24}));
  EXPECT_EQ(testing::values_of((*add)(TensorList{a, b})[0]), testing::values_of(y));
  kiln::sum(y).backward();
  EXPECT_EQ(testing::values_of(a.grad()), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(testing::values_of(b.grad()), (std::vector<double>{2, 2}));
  std::ostringstream os;
  os << *add;
  EXPECT_EQ(os.str(), "Add()");
}

// ---- errors ----

TEST(CifarResNetErrors, NameTheBadValue) {
  testing::expect_error([] { CifarResNet(21); },
                        "CifarResNet: depth must be 6n + 2 with n >= 1 (20, 32, 44, 56, 110), got 21");
  testing::expect_error([] { CifarResNet(2); }, "got 2");
  testing::expect_error([] { CifarResNet(20, 0); }, "CifarResNet: num_classes must be at least 1, got 0");
  testing::expect_error([] { BasicBlock(16, 32, 0); },
                        "BasicBlock: channels and stride must be positive, got in_channels=16, out_channels=32, "
                        "stride=0");
  auto net = std::make_shared<CifarResNet>();
  testing::expect_error([&] { (*net)(kiln::randn({2, 1, 32, 32})); },
                        "CifarResNet: expected images of shape (N, 3, H, W), got [2, 1, 32, 32]");
  auto add = std::make_shared<Add>();
  testing::expect_error([&] { (*add)(TensorList{kiln::randn({2})}); }, "Add: expected 2 tensors to add, got 1");
}

}  // namespace
}  // namespace kiln::nn
