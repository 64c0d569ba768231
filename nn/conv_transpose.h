// ConvTranspose2d, as torch.nn.ConvTranspose2d: the adjoint of a Conv2d
// with the same settings, which maps a Conv2d's output size back to its
// input size (the upsampling layer of a DCGAN generator).
//
//   auto up = std::make_shared<nn::ConvTranspose2d>(128, 64, 4, /*stride=*/2, /*padding=*/1);  // H -> 2H
//   nn::ConvTranspose2d same(nn::ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1).bias(false));   // as LibTorch
#pragma once

#include <cstdint>

#include "nn/module.h"
#include "tensor/arg.h"
#include "tensor/conv.h"

namespace kiln::nn {

// torch.nn.ConvTranspose2d's arguments (Note [Option builders] in
// tensor/arg.h); a Size2d is one int for both sides or {h, w}. torch's
// transposed convolution pads only with zeros, so there is no padding_mode.
class ConvTranspose2dOptions {
 public:
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, Size2d kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

  KILN_ARG(int64_t, in_channels);
  KILN_ARG(int64_t, out_channels);
  KILN_ARG(Size2d, kernel_size);
  KILN_ARG(Size2d, stride) = 1;
  KILN_ARG(Size2d, padding) = 0;
  // Added to one side of the output, to pick among the input sizes that a
  // strided convolution maps to the same output size.
  KILN_ARG(Size2d, output_padding) = 0;
  KILN_ARG(int64_t, groups) = 1;
  KILN_ARG(bool, bias) = true;
  KILN_ARG(Size2d, dilation) = 1;
};

// Parameters "weight" (in_channels, out_channels / groups, kh, kw) and
// "bias" (out_channels), absent when bias is false, initialised as torch's
// reset_parameters: kaiming_uniform(a = sqrt(5)) for the weight and
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias, where torch's fan_in is
// computed from the weight's dim 1: out_channels / groups * kh * kw. Both
// channel counts must be divisible by groups; output_padding must be below
// stride or dilation. The constructor's argument order is torch's.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride = 1,
                  Size2d padding = 0, Size2d output_padding = 0, int64_t groups = 1, bool bias = true,
                  Size2d dilation = 1);
  explicit ConvTranspose2d(const ConvTranspose2dOptions& o)
      : ConvTranspose2d(o.in_channels(), o.out_channels(), o.kernel_size(), o.stride(), o.padding(), o.output_padding(),
                        o.groups(), o.bias(), o.dilation()) {}

  // input (N, in_channels, H, W) or (in_channels, H, W).
  Tensor forward(const Tensor& input) override;
  // "128, 64, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1)", as torch.
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t in_channels;
  const int64_t out_channels;
  const Size2d kernel_size;
  // stride, padding, dilation and groups of the Conv2d this is the adjoint
  // of, passed to F::conv_transpose2d as they are (Note [One convolution
  // parameter struct] in tensor/conv.h).
  const Conv2dParams params;
  const Size2d output_padding;
  Tensor weight;
  Tensor bias;
};

}  // namespace kiln::nn
