// Conv1d, as torch.nn.Conv1d, with its padding modes: a composite of conv2d
// on a height-1 image (Note [Composite layers] in nn/functional_composite.h).
//
//   auto conv = std::make_shared<nn::Conv1d>(16, 32, /*kernel_size=*/3, /*stride=*/1, /*padding=*/1);
//   Tensor y = (*conv)(x);   // x: (N, 16, L) -> (N, 32, L)
//   nn::Conv1d same(nn::Conv1dOptions(16, 32, 3).padding(1));   // as LibTorch
//   nn::Conv1d ring(nn::Conv1dOptions(16, 32, 3).padding(1).padding_mode(nn::PaddingMode::Circular));
//   nn::Conv1d keep(nn::Conv1dOptions(16, 32, 4).padding(kiln::kSame));   // L in, L out
#pragma once

#include <cstdint>

#include "nn/conv.h"
#include "nn/module.h"
#include "tensor/arg.h"

namespace kiln::nn {

// torch.nn.Conv1d's arguments (Note [Option builders] in tensor/arg.h); the
// padding is an int, kiln::kSame or kiln::kValid (nn/conv_padding.h).
class Conv1dOptions {
 public:
  Conv1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

  KILN_ARG(int64_t, in_channels);
  KILN_ARG(int64_t, out_channels);
  KILN_ARG(int64_t, kernel_size);
  KILN_ARG(int64_t, stride) = 1;
  KILN_ARG(Conv1dPadding, padding) = 0;
  KILN_ARG(int64_t, dilation) = 1;
  KILN_ARG(int64_t, groups) = 1;
  KILN_ARG(bool, bias) = true;
  KILN_ARG(PaddingMode, padding_mode) = PaddingMode::Zeros;  // see nn/conv.h
};

// Parameters "weight" (out_channels, in_channels / groups, kernel_size) and
// "bias" (out_channels), absent when bias is false, initialised as torch's
// reset_parameters: both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in_channels / groups * kernel_size. Both channel counts must be
// divisible by groups; padding='same' needs stride 1. The constructor's
// argument order is torch's.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, Conv1dPadding padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true, PaddingMode padding_mode = PaddingMode::Zeros);
  explicit Conv1d(const Conv1dOptions& o)
      : Conv1d(o.in_channels(), o.out_channels(), o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.groups(),
               o.bias(), o.padding_mode()) {}

  // input (N, in_channels, L) or (in_channels, L).
  Tensor forward(const Tensor& input) override;
  // "16, 32, kernel_size=(3,), stride=(1,)", then padding ("padding=(1,)",
  // "padding=same"), dilation and groups when not their defaults, "bias=False" without bias and
  // "padding_mode=circular" when not zeros, as torch.
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t in_channels;
  const int64_t out_channels;
  const int64_t kernel_size;
  const int64_t stride;
  const Conv1dPadding padding;  // explicit, valid or same, as given
  const int64_t dilation;
  const int64_t groups;
  const PaddingMode padding_mode;
  Tensor weight;
  Tensor bias;
};

}  // namespace kiln::nn
