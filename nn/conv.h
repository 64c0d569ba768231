// Conv2d, as torch.nn.Conv2d, with its padding modes.
//
//   auto conv = std::make_shared<nn::Conv2d>(3, 6, 5);                  // LeNet's first layer
//   auto dw = std::make_shared<nn::Conv2d>(32, 32, 3, 1, 1, 1, /*groups=*/32);  // depthwise
//   nn::Conv2d down(nn::Conv2dOptions(16, 32, 3).stride(2).padding(1).bias(false));   // as LibTorch
//   nn::Conv2d edge(nn::Conv2dOptions(3, 8, 3).padding(1).padding_mode(nn::PaddingMode::Reflect));
//   nn::Conv2d keep(nn::Conv2dOptions(3, 8, 4).padding(kiln::kSame));   // H x W in, H x W out
#pragma once

#include <cstdint>

#include "nn/conv_padding.h"
#include "nn/module.h"
#include "tensor/arg.h"
#include "tensor/conv.h"

namespace kiln::nn {

// torch's padding_mode of Conv1d and Conv2d. Zeros is the convolution's own
// zero padding; the others pad the input first with F::pad's reflect,
// replicate or circular mode by the padding's amount on each side (same's
// uneven sides included, Note [Same padding] in nn/conv_padding.h), and the
// convolution then pads nothing, as torch's _conv_forward.
enum class PaddingMode { Zeros, Reflect, Replicate, Circular };

// torch.nn.Conv2d's arguments (Note [Option builders] in tensor/arg.h); a
// Size2d is one int for both sides or {h, w}: .stride(2), .padding({1, 0});
// the padding may also be kiln::kSame or kiln::kValid (nn/conv_padding.h).
class Conv2dOptions {
 public:
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Size2d kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

  KILN_ARG(int64_t, in_channels);
  KILN_ARG(int64_t, out_channels);
  KILN_ARG(Size2d, kernel_size);
  KILN_ARG(Size2d, stride) = 1;
  KILN_ARG(Conv2dPadding, padding) = 0;
  KILN_ARG(Size2d, dilation) = 1;
  KILN_ARG(int64_t, groups) = 1;
  KILN_ARG(bool, bias) = true;
  KILN_ARG(PaddingMode, padding_mode) = PaddingMode::Zeros;
};

// Parameters "weight" (out_channels, in_channels / groups, kh, kw) and
// "bias" (out_channels), absent when bias is false, initialised as torch's
// reset_parameters: both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in_channels / groups * kh * kw. Both channel counts must be
// divisible by groups; padding='same' needs stride 1. The constructor's
// argument order is torch's.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride = 1, Conv2dPadding padding = 0,
         Size2d dilation = 1, int64_t groups = 1, bool bias = true, PaddingMode padding_mode = PaddingMode::Zeros);
  explicit Conv2d(const Conv2dOptions& o)
      : Conv2d(o.in_channels(), o.out_channels(), o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.groups(),
               o.bias(), o.padding_mode()) {}

  // input (N, in_channels, H, W) or (in_channels, H, W).
  Tensor forward(const Tensor& input) override;
  // "3, 6, kernel_size=(5, 5), stride=(1, 1)", then padding ("padding=(1, 1)",
  // "padding=same"), dilation and groups when not their defaults,
  // "bias=False" without bias and "padding_mode=reflect" when not zeros, as
  // torch.
  std::string extra_repr() const override;
  void reset_parameters();
  // Whether F::conv2d with `params` alone computes this layer: zero padding
  // the same on both sides of each dim (not a padding_mode other than
  // zeros, nor an uneven 'same'). Code that rebuilds the layer from its
  // params (quant's fusion and int8 convolutions) needs it.
  bool padded_by_params() const;

  const int64_t in_channels;
  const int64_t out_channels;
  const Size2d kernel_size;
  // The padding as given: explicit, valid or same.
  const Conv2dPadding padding;
  // stride, padding, dilation and groups, passed to F::conv2d as they are
  // (Note [One convolution parameter struct] in tensor/conv.h). The padding
  // here is what the convolution pads on each side: the explicit padding,
  // 0 for valid, and for same the before side's (Note [Same padding] in
  // nn/conv_padding.h).
  const Conv2dParams params;
  const PaddingMode padding_mode;
  Tensor weight;
  Tensor bias;
};

}  // namespace kiln::nn
