#include "nn/models/resnet.h"

#include <string>

#include "nn/activation.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/functional_modules.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "nn/pooling.h"

namespace kiln::nn {

namespace {

// Submodule `path` of `parent` on x, found by name at this call (Note
// [ResNet submodules by name]).
Tensor run(const Module& parent, const std::string& path, const Tensor& x) {
  return (*parent.get_submodule(path))(x);
}

// A bias-free convolution with torchvision's ResNet initialisation.
std::shared_ptr<Conv2d> conv(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride) {
  auto layer = std::make_shared<Conv2d>(in_channels, out_channels, kernel, stride, kernel / 2, 1, 1, /*bias=*/false);
  init::kaiming_normal_(layer->weight, 0.0, "fan_out", "relu");
  return layer;
}

}  // namespace

namespace resnet {

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride)
    : in_channels(in_channels),
      out_channels(out_channels),
      stride(stride),
      has_downsample(stride != 1 || in_channels != out_channels) {
  KILN_CHECK(in_channels > 0 && out_channels > 0 && stride > 0,
             "BasicBlock: channels and stride must be positive, got in_channels=", in_channels,
             ", out_channels=", out_channels, ", stride=", stride);
  register_module("conv1", conv(in_channels, out_channels, 3, stride));
  register_module("bn1", std::make_shared<BatchNorm2d>(out_channels));
  register_module("relu1", std::make_shared<ReLU>());
  register_module("conv2", conv(out_channels, out_channels, 3, 1));
  register_module("bn2", std::make_shared<BatchNorm2d>(out_channels));
  if (has_downsample) {
    register_module("downsample", std::make_shared<Sequential>(conv(in_channels, out_channels, 1, stride),
                                                               std::make_shared<BatchNorm2d>(out_channels)));
  }
  register_module("add", std::make_shared<Add>());
  register_module("relu2", std::make_shared<ReLU>());
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = run(*this, "relu1", run(*this, "bn1", run(*this, "conv1", x)));  // (N, out, H', W')
  h = run(*this, "bn2", run(*this, "conv2", h));                             // (N, out, H', W')
  const Tensor shortcut = has_downsample ? run(*this, "downsample.1", run(*this, "downsample.0", x)) : x;
  return run(*this, "relu2", (*get_submodule("add"))(TensorList{h, shortcut})[0]);
}

}  // namespace resnet

CifarResNet::CifarResNet(int64_t depth, int64_t num_classes)
    : depth(depth), num_classes(num_classes), blocks_per_stage((depth - 2) / 6) {
  KILN_CHECK(depth >= 8 && (depth - 2) % 6 == 0,
             "CifarResNet: depth must be 6n + 2 with n >= 1 (20, 32, 44, 56, 110), got ", depth);
  KILN_CHECK(num_classes >= 1, "CifarResNet: num_classes must be at least 1, got ", num_classes);
  register_module("conv1", conv(3, 16, 3, 1));
  register_module("bn1", std::make_shared<BatchNorm2d>(16));
  register_module("relu", std::make_shared<ReLU>());
  int64_t channels = 16;
  for (int64_t stage = 0; stage < 3; ++stage) {
    const int64_t width = 16 << stage;
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks_per_stage; ++b) {
      const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
      layer->push_back(std::make_shared<resnet::BasicBlock>(channels, width, stride));
      channels = width;
    }
    register_module("layer" + std::to_string(stage + 1), layer);
  }
  register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  register_module("fc", std::make_shared<Linear>(64, num_classes));
}

std::vector<std::vector<std::string>> CifarResNet::fusion_groups(const std::string& prefix) const {
  std::vector<std::vector<std::string>> groups{{prefix + "conv1", prefix + "bn1", prefix + "relu"}};
  for (int64_t stage = 1; stage <= 3; ++stage) {
    for (int64_t block = 0; block < blocks_per_stage; ++block) {
      std::string b = prefix + "layer" + std::to_string(stage) + "." + std::to_string(block) + ".";
      groups.push_back({b + "conv1", b + "bn1", b + "relu1"});
      groups.push_back({b + "conv2", b + "bn2"});
      groups.push_back({b + "add", b + "relu2"});
      auto basic = std::dynamic_pointer_cast<resnet::BasicBlock>(get_submodule(b.substr(prefix.size(), b.size() - prefix.size() - 1)));
      if (basic && basic->has_downsample) groups.push_back({b + "downsample.0", b + "downsample.1"});
    }
  }
  return groups;
}

std::vector<std::pair<std::string, std::string>> CifarResNet::residual_convs(const std::string& prefix) const {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int64_t stage = 1; stage <= 3; ++stage) {
    for (int64_t block = 0; block < blocks_per_stage; ++block) {
      std::string b = prefix + "layer" + std::to_string(stage) + "." + std::to_string(block) + ".";
      pairs.emplace_back(b + "conv2", b + "add");
    }
  }
  return pairs;
}

Tensor CifarResNet::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == 3, "CifarResNet: expected images of shape (N, 3, H, W), got ",
             x.shape());
  Tensor h = run(*this, "relu", run(*this, "bn1", run(*this, "conv1", x)));  // (N, 16, 32, 32)
  for (int64_t stage = 1; stage <= 3; ++stage) {
    for (int64_t b = 0; b < blocks_per_stage; ++b) {
      h = run(*this, "layer" + std::to_string(stage) + "." + std::to_string(b), h);
    }
  }                                                      // (N, 64, 8, 8)
  h = functional::flatten(run(*this, "avgpool", h), 1);  // (N, 64)
  return run(*this, "fc", h);                            // (N, num_classes)
}

}  // namespace kiln::nn
