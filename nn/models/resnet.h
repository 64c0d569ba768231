// ResNet for CIFAR-10 (He et al. 2016, "Deep Residual Learning for Image
// Recognition", section 4.2): a 3x3 convolution to 16 channels, three stages
// of n BasicBlocks at 16, 32 and 64 channels on 32x32, 16x16 and 8x8 maps,
// global average pooling and a Linear classifier: 6n + 2 weighted layers,
// ResNet-20 for n = 3 (272,474 parameters). scripts/resnet20_torch.py holds
// the same model in PyTorch with the same module names, so that state dicts
// interchange and the trained weights can be exported to PyTorch and ONNX:
//
//   CifarResNet(depth = 20)                  x (N, 3, 32, 32)
//     relu(bn1(conv1(x)))                    (N, 16, 32, 32)   conv1 3x3, no bias
//     layer1: BasicBlock x 3                 (N, 16, 32, 32)
//     layer2: BasicBlock x 3                 (N, 32, 16, 16)   layer2.0 has stride 2
//     layer3: BasicBlock x 3                 (N, 64, 8, 8)     layer3.0 has stride 2
//     flatten(avgpool(.), 1)                 (N, 64)           AdaptiveAvgPool2d(1)
//     fc                                     (N, 10) logits
//
//   BasicBlock(in, out, stride)              x (N, in, H, W) -> (N, out, H / stride, W / stride)
//     h = relu1(bn1(conv1(x)))               3x3, stride, no bias
//     h = bn2(conv2(h))                      3x3, no bias
//     relu2(add(h, downsample(x) or x))      downsample.0 1x1 stride conv, downsample.1 BatchNorm
//
// Module names (state-dict keys follow them; the ReLUs and adds hold none):
//   conv1 bn1 relu layer{1,2,3}.{0,1,2}.{conv1,bn1,relu1,conv2,bn2,add,relu2}
//   layer{2,3}.0.downsample.{0,1} avgpool fc
//
// The shortcut where the shape changes is the paper's option B, a 1x1
// convolution with stride 2 and a BatchNorm, rather than option A's identity
// subsampled and padded with zero channels: the projection quantizes like
// any convolution (and fuses with its BatchNorm), while option A would need
// a quantized strided slice and channel padding on the residual path. It
// costs 2,752 parameters over option A's 269,722.
//
// Initialisation is torchvision's for ResNets: convolutions
// kaiming_normal_(fan_out, relu), BatchNorm weight 1 and bias 0, fc
// Linear's default, drawn from the default generator.
//
// Note [ResNet submodules by name]
// The forward passes reach every submodule through the registry
// (get_submodule, by name) at each call, never through a typed member or a
// Sequential's own list. So replacing a submodule with replace_module (what
// eager-mode quantization does: Conv2d -> a quantized conv, BatchNorm2d ->
// Identity after fusion, Add -> a quantized add, ReLU -> Identity when fused)
// changes what runs, as Python's attribute lookup does for PyTorch's eager
// mode. That is also why there are no member handles to the layers: one
// would keep pointing at the float layer after a swap (Module::replace_module).
// The stages are Sequentials, for torch's names and printing, but the model
// runs their blocks by name ("layer2.0") for the same reason.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace kiln::nn {

namespace resnet {

// The two-convolution residual block of He et al. Submodules, in
// registration order (that of the PyTorch twin): conv1, bn1, relu1, conv2,
// bn2, downsample (a Sequential of a 1x1 Conv2d and a BatchNorm2d, only
// when stride != 1 or in_channels != out_channels), add (nn::Add), relu2.
class BasicBlock : public Module {
 public:
  // Throws naming the values when a channel count or the stride is not positive.
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride = 1);

  // x: (N, in_channels, H, W) -> (N, out_channels, ceil(H / stride), ceil(W / stride)).
  Tensor forward(const Tensor& x) override;

  const int64_t in_channels;
  const int64_t out_channels;
  const int64_t stride;
  const bool has_downsample;
};

}  // namespace resnet

class CifarResNet : public Module {
 public:
  // depth = 6n + 2 (20, 32, 44, 56, 110): n BasicBlocks per stage. Throws
  // naming the value for another depth or num_classes < 1.
  explicit CifarResNet(int64_t depth = 20, int64_t num_classes = 10);

  // x: (N, 3, H, W) -> logits (N, num_classes); 32x32 is the size the model
  // is made for (8x8 maps reach the pooling), any size of at least 1x1 runs.
  Tensor forward(const Tensor& x) override;

  const int64_t depth;
  const int64_t num_classes;
  const int64_t blocks_per_stage;

  // The Conv2d, BatchNorm2d (and ReLU) runs of the forward and each block's
  // residual add with its ReLU, by module name below `prefix`, in the order
  // they run: what quant::fuse_modules takes ({"conv1", "bn1", "relu"},
  // {"layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu1"}, {"layer1.0.conv2",
  // "layer1.0.bn2"}, {"layer1.0.add", "layer1.0.relu2"}, ...,
  // {"layer2.0.downsample.0", "layer2.0.downsample.1"}, ...).
  std::vector<std::vector<std::string>> fusion_groups(const std::string& prefix = "") const;

  // Each block's last conv and the residual add its output feeds (through
  // bn2, an Identity once fused), below `prefix`: {"layer1.0.conv2",
  // "layer1.0.add"}, ...; what quant::fuse_conv_add takes after convert.
  std::vector<std::pair<std::string, std::string>> residual_convs(const std::string& prefix = "") const;
};

}  // namespace kiln::nn
