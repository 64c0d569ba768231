// The workflows of quant/quantize.h on LeNet and ResNet-20: static, QAT and
// dynamic quantization, fusion, per-layer qconfigs, save and load, reports,
// and the errors. The central check is Note [Bit-exact fake quantization]:
// the fake-quantized model's output equals the converted int8 model's
// dequantized output bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/constants.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/models/gpt.h"
#include "nn/models/lenet.h"
#include "nn/models/resnet.h"
#include "optim/sgd.h"
#include "quant/fake_quant_modules.h"
#include "quant/fuse.h"
#include "quant/quantize.h"
#include "quant/quantized_modules.h"
#include "quant/stubs.h"
#include "tensor/ops.h"
#include "tensor/quantize.h"
#include "tensor/safetensors.h"

namespace kiln::quant {
namespace {

namespace F = nn::functional;

// Images roughly like normalised CIFAR-10: N(0, 1).
Tensor images(int64_t n, uint64_t seed) {
  manual_seed(seed);
  return randn({n, 3, 32, 32});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// fn throws a kiln::Error whose message contains `expected`.
void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "no kiln::Error; expected one containing: " << expected;
}

std::shared_ptr<QuantWrapper> lenet(uint64_t seed = 1) {
  manual_seed(seed);
  return std::make_shared<QuantWrapper>(std::make_shared<nn::LeNet>());
}

// ResNet-20's Conv+BN(+ReLU) groups below the wrapper.
std::vector<std::vector<std::string>> resnet_groups(const std::string& prefix) {
  return nn::CifarResNet(20).fusion_groups(prefix);
}

std::shared_ptr<QuantWrapper> resnet20(uint64_t seed = 2) {
  manual_seed(seed);
  auto net = std::make_shared<nn::CifarResNet>(20);
  // Running statistics that are not the initial (0, 1), so folding matters.
  net->train();
  {
    NoGradGuard no_grad;
    for (int i = 0; i < 2; ++i) (*net)(images(8, 100 + i));
  }
  return std::make_shared<QuantWrapper>(net);
}

void calibrate(nn::Module& model, int batches = 3) {
  NoGradGuard no_grad;
  for (int i = 0; i < batches; ++i) model(images(16, 10 + i));
}

// Fake-quantized output of a calibrated prepared model, then the converted
// model's output, on the same images.
std::pair<Tensor, Tensor> fake_and_converted(nn::Module& model, const Tensor& x) {
  disable_observer(model);
  enable_fake_quant(model);
  Tensor fake;
  {
    NoGradGuard no_grad;
    fake = model(x);
  }
  convert(model);
  Tensor converted = model(x);
  return {fake, converted};
}

// The converted LeNet's logits on x are within a tenth of the float
// LeNet's range of them: a few output steps.
void expect_near_float_lenet(const Tensor& converted, const Tensor& x) {
  auto float_model = lenet();
  float_model->eval();
  NoGradGuard no_grad;
  Tensor reference = (*float_model)(x);
  double max_err = ops::max(ops::abs(ops::sub(reference, converted))).item<float>();
  double range = ops::max(ops::abs(reference)).item<float>();
  EXPECT_LT(max_err, 0.1 * range) << "int8 LeNet strays too far from float";
}

TEST(QuantStatic, LeNetFakeQuantEqualsConvertedBitForBit) {
  auto model = lenet();
  model->eval();
  prepare(*model);
  calibrate(*model);
  Tensor x = images(64, 7);
  auto [fake, converted] = fake_and_converted(*model, x);
  EXPECT_EQ(converted.dtype(), DType::Float32);
  EXPECT_EQ(converted.shape(), (Shape{64, 10}));
  EXPECT_TRUE(same_bits(fake, converted));
  // And the int8 model is close to the float one.
  expect_near_float_lenet(converted, x);
}

// With 7-bit activations (what CPUs without VNNI multiply fastest): the
// observers' grids stop at 127, the converted model still equals the
// fake-quantized one to the bit, and stays close to float.
TEST(QuantStatic, ReducedRangeLeNetFakeQuantEqualsConvertedBitForBit) {
  auto model = lenet();
  model->eval();
  prepare(*model, QConfigMapping(default_qconfig(/*reduce_range=*/true)));
  calibrate(*model);
  auto fc1 = std::dynamic_pointer_cast<FakeQuantModule>(model->get_submodule("module.fc1"));
  ASSERT_NE(fc1, nullptr);
  const QParams grid = observer_qparams(*fc1->output_observer(), "module.fc1");
  EXPECT_EQ(grid.quant_min, 0);
  EXPECT_EQ(grid.quant_max, 127);
  Tensor x = images(64, 8);
  auto [fake, converted] = fake_and_converted(*model, x);
  EXPECT_TRUE(same_bits(fake, converted));
  expect_near_float_lenet(converted, x);
}

TEST(QuantStatic, ConvertedLayersAreInt8AndNamed) {
  auto model = lenet();
  model->eval();
  prepare(*model);
  calibrate(*model);
  convert(*model);
  auto fc1 = std::dynamic_pointer_cast<QuantizedLinear>(model->get_submodule("module.fc1"));
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->qualified_name, "module.fc1");
  EXPECT_EQ(fc1->weight.dtype(), DType::Int8);
  EXPECT_TRUE(fc1->weight.is_quantized());
  EXPECT_NE(std::dynamic_pointer_cast<QuantizedConv2d>(model->get_submodule("module.conv1")), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<Quantize>(model->get_submodule("quant")), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<DeQuantize>(model->get_submodule("dequant")), nullptr);
}

TEST(QuantStatic, ResNet20FusedFakeQuantEqualsConvertedBitForBit) {
  auto model = resnet20();
  model->eval();
  fuse_modules(*model, resnet_groups("module."));
  prepare(*model);
  calibrate(*model);
  Tensor x = images(4, 8);
  auto [fake, converted] = fake_and_converted(*model, x);
  EXPECT_TRUE(same_bits(fake, converted));
  // The residual add carries the block's last ReLU (fused Add+ReLU).
  auto add = std::dynamic_pointer_cast<QuantizedAdd>(model->get_submodule("module.layer1.0.add"));
  ASSERT_NE(add, nullptr);
  EXPECT_TRUE(add->relu);
  EXPECT_NE(std::dynamic_pointer_cast<nn::Identity>(model->get_submodule("module.layer1.0.relu2")), nullptr);
}

TEST(QuantFuse, EvalFusionFoldsBatchNormExactlyEnough) {
  auto model = resnet20();
  model->eval();
  Tensor x = images(2, 9);
  NoGradGuard no_grad;
  Tensor before = (*model)(x);
  fuse_modules(*model, resnet_groups("module."));
  Tensor after = (*model)(x);
  EXPECT_TRUE(allclose(before, after, 1e-4, 1e-4));
  EXPECT_NE(std::dynamic_pointer_cast<nn::Identity>(model->get_submodule("module.layer1.0.bn1")), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<AddReLU>(model->get_submodule("module.layer3.2.add")), nullptr);
}

TEST(QuantFuse, BadGroupsAreErrorsNamingThem) {
  auto model = resnet20();
  model->eval();
  try {
    fuse_modules(*model, {{"module.fc", "module.layer1.0.bn1"}});
    FAIL() << "fused a Linear with a BatchNorm";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'module.fc', 'module.layer1.0.bn1'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fuse_modules(*model, {{"module.conv1", "module.nope"}}), Error);
  model->train();
  EXPECT_THROW(fuse_modules(*model, {{"module.conv1", "module.bn1"}}), Error);  // eval fusion in training
}

TEST(QuantStatic, LayerLeftInFloatStaysBitExact) {
  auto model = lenet();
  model->eval();
  QConfigMapping mapping;
  mapping.set_module_name("module.fc2", std::nullopt);
  prepare(*model, mapping);
  calibrate(*model);
  auto [fake, converted] = fake_and_converted(*model, images(8, 3));
  EXPECT_TRUE(same_bits(fake, converted));
  auto island = std::dynamic_pointer_cast<FloatLayer>(model->get_submodule("module.fc2"));
  ASSERT_NE(island, nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<nn::Linear>(island->layer), nullptr);
}

TEST(QuantQAT, TrainsThenConvertsBitExact) {
  auto model = resnet20(4);
  model->train();
  fuse_modules_qat(*model, resnet_groups("module."));
  prepare_qat(*model);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  Tensor x = images(16, 21);
  manual_seed(5);
  Tensor y = randint(0, 10, {16});
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy((*model)(x), y);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<float>();
    last = loss.item<float>();
  }
  EXPECT_LT(last, first) << "QAT did not lower the loss on a fixed batch";
  disable_observer(*model);
  freeze_bn_stats(*model);
  model->eval();
  Tensor probe = images(4, 22);
  Tensor fake;
  {
    NoGradGuard no_grad;
    fake = (*model)(probe);
  }
  convert(*model);
  EXPECT_TRUE(same_bits(fake, (*model)(probe)));
  // And with each block's conv2 run by its add (fuse_conv_add).
  fuse_conv_add(*model, nn::CifarResNet(20).residual_convs("module."));
  EXPECT_TRUE(same_bits(fake, (*model)(probe)));
}

TEST(QuantQAT, GradientsReachWeightsThroughTheStraightThroughEstimator) {
  auto model = lenet(6);
  model->train();
  prepare_qat(*model);
  Tensor loss = kiln::sum((*model)(images(4, 23)));
  loss.backward();
  auto conv1 = std::dynamic_pointer_cast<FakeQuantConv2d>(model->get_submodule("module.conv1"));
  ASSERT_NE(conv1, nullptr);
  ASSERT_TRUE(conv1->weight.grad().defined());
  EXPECT_GT(ops::max(ops::abs(conv1->weight.grad())).item<float>(), 0.0f);
}

TEST(QuantDynamic, LinearLayersCloseToFloat) {
  auto model = std::make_shared<nn::LeNet>();
  model->eval();
  Tensor x = images(16, 30);
  NoGradGuard no_grad;
  Tensor reference = (*model)(x);
  quantize_dynamic(*model);
  EXPECT_NE(std::dynamic_pointer_cast<DynamicQuantizedLinear>(model->get_submodule("fc1")), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<nn::Conv2d>(model->get_submodule("conv1")), nullptr);
  Tensor out = (*model)(x);
  double range = ops::max(ops::abs(reference)).item<float>();
  EXPECT_TRUE(allclose(out, reference, 0.0, 0.05 * range));
}

TEST(QuantDynamic, GPTLinearLayersAndGeneration) {
  manual_seed(12);
  nn::GPTConfig config{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
  auto gpt = std::make_shared<nn::GPT>(config);
  gpt->eval();
  manual_seed(13);
  Tensor idx = randint(0, 64, {2, 16});
  NoGradGuard no_grad;
  Tensor reference = (*gpt)(idx);
  quantize_dynamic(*gpt);
  int swapped = 0;
  for (const auto& m : gpt->modules()) swapped += std::dynamic_pointer_cast<DynamicQuantizedLinear>(m) ? 1 : 0;
  EXPECT_EQ(swapped, 2 * 4);  // per block: c_attn, attn.c_proj, c_fc, mlp.c_proj (the tied head stays)
  Tensor logits = (*gpt)(idx);
  double range = ops::max(ops::abs(reference)).item<float>();
  EXPECT_TRUE(allclose(logits, reference, 0.0, 0.05 * range));
  // Generation with the KV cache runs the int8 layers too.
  Tensor out = gpt->generate(idx.narrow(1, 0, 4), 6, {.temperature = 0.0});
  EXPECT_EQ(out.shape(), (Shape{2, 10}));
}

TEST(QuantDynamic, ConvToo) {
  auto model = std::make_shared<nn::LeNet>();
  model->eval();
  Tensor x = images(4, 31);
  NoGradGuard no_grad;
  Tensor reference = (*model)(x);
  quantize_dynamic(*model, {.conv = true});
  EXPECT_NE(std::dynamic_pointer_cast<DynamicQuantizedConv2d>(model->get_submodule("conv2")), nullptr);
  double range = ops::max(ops::abs(reference)).item<float>();
  EXPECT_TRUE(allclose((*model)(x), reference, 0.0, 0.05 * range));
}

TEST(QuantReports, Int8LeNetIsUnderAQuarterOfFloat) {
  auto float_model = lenet();
  int64_t float_bytes = model_size_bytes(*float_model);
  auto model = lenet();
  model->eval();
  prepare(*model);
  calibrate(*model, 1);
  convert(*model);
  int64_t int8_bytes = model_size_bytes(*model);
  EXPECT_EQ(float_bytes, 62006 * 4);
  EXPECT_LE(static_cast<double>(int8_bytes), 0.26 * static_cast<double>(float_bytes))
      << int8_bytes << " of " << float_bytes;
}

TEST(QuantReports, SensitivityQuantizesOneLayerAtATime) {
  int calls = 0;
  auto rows = sensitivity(
      [] { auto m = std::make_shared<nn::LeNet>(); m->eval(); return m; },
      [](nn::Module& m) { calibrate(m, 1); },
      [&](nn::Module& m) {
        ++calls;
        int quantized = 0;
        for (const auto& sub : m.modules()) quantized += std::dynamic_pointer_cast<QuantizedModule>(sub) ? 1 : 0;
        EXPECT_EQ(quantized, 2);  // the layer's Quantize and the layer
        return static_cast<double>(quantized);
      });
  std::vector<std::string> names;
  for (const auto& r : rows) names.push_back(r.layer);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2", "fc3"}));
  EXPECT_EQ(calls, 5);
}

TEST(QuantSaveLoad, ConvertedStateDictRoundTripsThroughSafetensors) {
  auto model = lenet();
  model->eval();
  prepare(*model);
  calibrate(*model);
  convert(*model);
  Tensor x = images(8, 40);
  Tensor expected = (*model)(x);
  auto path = std::filesystem::temp_directory_path() / "kiln_quant_lenet.safetensors";
  save_safetensors(path.string(), model->state_dict());
  // Another converted LeNet, calibrated on other data: different scales until loaded.
  auto other = lenet(99);
  other->eval();
  prepare(*other);
  {
    NoGradGuard no_grad;
    (*other)(images(4, 77));
  }
  convert(*other);
  EXPECT_FALSE(same_bits((*other)(x), expected));
  other->load_state_dict(load_safetensors(path.string()));
  EXPECT_TRUE(same_bits((*other)(x), expected));
  std::filesystem::remove(path);
}

TEST(QuantErrors, UnfusedBatchNormIsNamed) {
  auto model = resnet20();
  model->eval();
  try {
    prepare(*model);
    FAIL() << "prepared an unfused BatchNorm2d";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("module.bn1 (BatchNorm2d) cannot be quantized"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fuse_modules"), std::string::npos) << msg;
  }
}

// A Conv2d that F::conv2d with its params alone does not compute (an
// uneven padding='same', or a padding_mode) is refused by fusion, prepare
// and quantize_dynamic, each naming the layer, rather than quantized into a
// different convolution.
TEST(QuantErrors, ConvolutionsPaddedOtherwiseThanByTheirParamsAreNamed) {
  auto make = [](nn::Conv2dOptions options) {
    auto model = std::make_shared<QuantWrapper>(
        std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(options), std::make_shared<nn::ReLU>()));
    model->eval();
    return model;
  };
  const auto uneven = nn::Conv2dOptions(3, 4, 4).padding(kiln::kSame);  // 3 = 1 before + 2 after
  const auto reflect = nn::Conv2dOptions(3, 4, 3).padding(1).padding_mode(nn::PaddingMode::Reflect);
  expect_error([&] { prepare(*make(uneven)); }, "prepare: module.0 pads unevenly (padding='same'");
  expect_error([&] { fuse_modules(*make(reflect), {{"module.0", "module.1"}}); },
               "fuse_modules: group ['module.0', 'module.1']: 'module.0' pads with a padding_mode other than zeros");
  expect_error([&] { quantize_dynamic(*make(reflect), {.conv = true}); },
               "quantize_dynamic: module.0 pads with a padding_mode other than zeros");
  // An odd kernel's 'same' is even, and quantizes.
  auto even = make(nn::Conv2dOptions(3, 4, 3).padding(kiln::kSame));
  EXPECT_NO_THROW(prepare(*even));
}

TEST(QuantErrors, ConvertWithoutCalibrationNamesTheLayer) {
  auto model = lenet();
  model->eval();
  prepare(*model);
  try {
    convert(*model);
    FAIL() << "converted without calibration";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("quant (QuantStub)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("calibration"), std::string::npos) << msg;
  }
}

TEST(QuantErrors, FloatIntoQuantizedLayerAndBack) {
  auto model = lenet();
  model->eval();
  prepare(*model);
  calibrate(*model);
  convert(*model);
  auto fc1 = model->get_submodule("module.fc1");
  try {
    (*fc1)(zeros({2, 400}));
    FAIL() << "a float tensor went into QuantizedLinear";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("module.fc1 (QuantizedLinear): expected a quint8 input, got float32"), std::string::npos)
        << msg;
  }
  auto quant = model->get_submodule("quant");
  Tensor q = (*quant)(zeros({1, 3, 32, 32}));
  EXPECT_THROW((*quant)(q), Error);  // quantizing a quantized tensor
}

TEST(QuantErrors, MappingNameThatIsNoModule) {
  auto model = lenet();
  QConfigMapping mapping;
  mapping.set_module_name("module.fc9", std::nullopt);
  EXPECT_THROW(prepare(*model, mapping), Error);
}

TEST(QuantErrors, FakeQuantizedLayerWithoutQuantStubIsNamed) {
  auto model = std::make_shared<nn::LeNet>();
  model->train();
  prepare_qat(*model);  // no QuantStub: conv1's input carries no grid
  try {
    (*model)(images(1, 1));
    FAIL() << "ran without a QuantStub";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv1 (FakeQuantConv2d)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("QuantStub"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::quant
