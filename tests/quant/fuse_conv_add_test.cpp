// quant::fuse_conv_add (Note [A conv run by the add it feeds] in
// quant/quantized_modules.h) on a converted ResNet-20: the same bits as
// the unfused converted model and as the fake-quantized one, the same
// state-dict keys (a saved model loads either way), a repr that names the
// pairs, and errors for pairs that are not a conv and its add or a forward
// that does not feed one to the other.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "autograd/grad_mode.h"
#include "nn/models/resnet.h"
#include "quant/fuse.h"
#include "quant/quantize.h"
#include "quant/quantized_modules.h"
#include "quant/stubs.h"
#include "tensor/factory.h"
#include "tensor/random.h"
#include "tensor/safetensors.h"

namespace kiln::quant {
namespace {

Tensor images(int64_t n, uint64_t seed) {
  manual_seed(seed);
  return randn({n, 3, 32, 32});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A ResNet-20 with running statistics of its own, fused, prepared and
// calibrated; its fake-quantized output on x; then converted.
struct Converted {
  std::shared_ptr<QuantWrapper> model;
  Tensor fake;
};

Converted converted_resnet20(const Tensor& x, uint64_t seed = 3) {
  manual_seed(seed);
  auto net = std::make_shared<nn::CifarResNet>(20);
  net->train();
  NoGradGuard no_grad;
  for (int i = 0; i < 2; ++i) (*net)(images(8, 100 + i));
  auto model = std::make_shared<QuantWrapper>(net);
  model->eval();
  fuse_modules(*model, net->fusion_groups("module."));
  prepare(*model);
  for (int i = 0; i < 3; ++i) (*model)(images(16, 10 + i));
  disable_observer(*model);
  enable_fake_quant(*model);
  Tensor fake = (*model)(x);
  convert(*model);
  return {model, fake};
}

std::vector<std::pair<std::string, std::string>> pairs() { return nn::CifarResNet(20).residual_convs("module."); }

TEST(QuantFuseConvAdd, ResNet20KeepsItsBitsAndStateDictKeys) {
  NoGradGuard no_grad;
  Tensor x = images(8, 8);
  Converted c = converted_resnet20(x);
  Tensor unfused = (*c.model)(x);
  ASSERT_TRUE(same_bits(unfused, c.fake));
  std::vector<std::string> keys;
  for (const auto& [name, t] : c.model->state_dict()) keys.push_back(name);

  fuse_conv_add(*c.model, pairs());
  EXPECT_TRUE(same_bits((*c.model)(x), c.fake));
  // Batch 1 (its positions split over threads) and another batch.
  Tensor one = images(1, 9), five = images(5, 10);
  Converted again = converted_resnet20(x);
  EXPECT_TRUE(same_bits((*c.model)(one), (*again.model)(one)));
  EXPECT_TRUE(same_bits((*c.model)(five), (*again.model)(five)));
  std::vector<std::string> fused_keys;
  for (const auto& [name, t] : c.model->state_dict()) fused_keys.push_back(name);
  EXPECT_EQ(fused_keys, keys);

  auto conv = std::dynamic_pointer_cast<QuantizedConv2d>(c.model->get_submodule("module.layer2.0.conv2"));
  auto add = std::dynamic_pointer_cast<QuantizedAdd>(c.model->get_submodule("module.layer2.0.add"));
  ASSERT_TRUE(conv && add);
  EXPECT_EQ(conv->runs_in, "module.layer2.0.add");
  EXPECT_EQ(add->conv, conv);
  EXPECT_NE(conv->extra_repr().find(", runs_in=module.layer2.0.add"), std::string::npos) << conv->extra_repr();
  EXPECT_EQ(add->extra_repr().rfind("conv=module.layer2.0.conv2, relu=True, ", 0), 0u) << add->extra_repr();
}

TEST(QuantFuseConvAdd, ThreadsRunOneFusedModelAtOnce) {
  NoGradGuard no_grad;
  Tensor x = images(2, 20), y = images(3, 21);
  Converted c = converted_resnet20(x);
  const Tensor want_x = (*c.model)(x), want_y = (*c.model)(y);
  fuse_conv_add(*c.model, pairs());
  Tensor got_x, got_y;
  std::thread tx([&] {
    NoGradGuard guard;
    for (int i = 0; i < 3; ++i) got_x = (*c.model)(x);
  });
  std::thread ty([&] {
    NoGradGuard guard;
    for (int i = 0; i < 3; ++i) got_y = (*c.model)(y);
  });
  tx.join();
  ty.join();
  EXPECT_TRUE(same_bits(got_x, want_x));
  EXPECT_TRUE(same_bits(got_y, want_y));
}

TEST(QuantFuseConvAdd, SavedModelsLoadEitherWay) {
  NoGradGuard no_grad;
  Tensor x = images(4, 30);
  Converted saved = converted_resnet20(x, 3);
  const Tensor want = (*saved.model)(x);
  auto path = std::filesystem::temp_directory_path() / "kiln_quant_resnet20_fused.safetensors";
  save_safetensors(path.string(), saved.model->state_dict());
  // Another model (other weights and scales), fused before loading: the
  // loaded weights repack, and the add runs them.
  Converted other = converted_resnet20(x, 5);
  fuse_conv_add(*other.model, pairs());
  EXPECT_FALSE(same_bits((*other.model)(x), want));
  other.model->load_state_dict(load_safetensors(path.string()));
  EXPECT_TRUE(same_bits((*other.model)(x), want));
  // And a fused model's state dict into an unfused one.
  save_safetensors(path.string(), other.model->state_dict());
  Converted plain = converted_resnet20(x, 7);
  plain.model->load_state_dict(load_safetensors(path.string()));
  EXPECT_TRUE(same_bits((*plain.model)(x), want));
  std::filesystem::remove(path);
}

TEST(QuantFuseConvAdd, PairsThatAreNoConvAndAddAreNamed) {
  NoGradGuard no_grad;
  Tensor x = images(2, 40);
  Converted c = converted_resnet20(x);
  EXPECT_NE(error_of([&] { fuse_conv_add(*c.model, {{"module.layer1.0.add", "module.layer1.0.add"}}); })
                .find("fuse_conv_add: in {module.layer1.0.add, module.layer1.0.add}, module.layer1.0.add is a "
                      "QuantizedAdd, not a QuantizedConv2d; fuse after convert()"),
            std::string::npos);
  fuse_conv_add(*c.model, {{"module.layer1.0.conv2", "module.layer1.0.add"}});
  EXPECT_NE(error_of([&] { fuse_conv_add(*c.model, {{"module.layer1.0.conv2", "module.layer1.1.add"}}); })
                .find("module.layer1.0.conv2 already runs in module.layer1.0.add"),
            std::string::npos);
}

TEST(QuantFuseConvAdd, AForwardThatDoesNotFeedTheConvToTheAddThrows) {
  NoGradGuard no_grad;
  Tensor x = images(2, 50);
  Converted c = converted_resnet20(x);
  // The next block's conv runs after this add: nothing has been handed on when the add runs.
  fuse_conv_add(*c.model, {{"module.layer1.1.conv1", "module.layer1.0.add"}});
  const std::string message = error_of([&] { (*c.model)(x); });
  EXPECT_NE(message.find("module.layer1.0.add (QuantizedAdd): runs module.layer1.1.conv1 (QuantizedConv2d) "
                         "(fuse_conv_add), but neither input is the one that conv handed on"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace kiln::quant
