// What Linear and the convolutions share: torch's default initialisation of a
// weight and its bias, a convolution's checks of its channels, groups and
// sizes, and its padding modes.
// Each layer's .cpp uses them; a layer's header does not need them.
#pragma once

#include <cmath>
#include <cstdint>

#include "nn/conv.h"
#include "nn/functional_composite.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/conv.h"
#include "tensor/error.h"

namespace kiln::nn {

// torch's reset_parameters for Linear and ConvNd: kaiming_uniform_(a = sqrt(5))
// for the weight, and uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias
// when it is defined; torch uses 0 for an empty weight (fan_in 0) rather
// than dividing by it.
inline void reset_weight_and_bias_(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (!bias.defined()) return;
  const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  init::uniform_(bias, -bound, bound);
}

// A convolution's channels and groups, as torch checks them; `layer` names it
// in the message ("Conv2d").
inline void check_conv_channels(const char* layer, int64_t in_channels, int64_t out_channels, int64_t groups) {
  KILN_CHECK(groups > 0, layer, ": groups must be a positive integer, got ", groups);
  KILN_CHECK(in_channels > 0 && out_channels > 0, layer, ": in_channels and out_channels must be positive, got ",
             in_channels, " and ", out_channels);
  KILN_CHECK(in_channels % groups == 0, layer, ": in_channels (", in_channels, ") must be divisible by groups (", groups,
             ")");
  KILN_CHECK(out_channels % groups == 0, layer, ": out_channels (", out_channels, ") must be divisible by groups (",
             groups, ")");
}

// A 2-d convolution's kernel size, stride and dilation (positive) and
// padding (not negative), as torch checks them; `layer` names it.
inline void check_conv_sizes(const char* layer, Size2d kernel_size, const Conv2dParams& p) {
  KILN_CHECK(kernel_size.h > 0 && kernel_size.w > 0 && p.stride.h > 0 && p.stride.w > 0 && p.dilation.h > 0 &&
                 p.dilation.w > 0,
             layer, ": kernel_size, stride and dilation must be positive, got ", repr::pair(kernel_size), ", ",
             repr::pair(p.stride), " and ", repr::pair(p.dilation));
  KILN_CHECK(p.padding.h >= 0 && p.padding.w >= 0, layer, ": padding must be >= 0, got ", repr::pair(p.padding));
}

// "reflect": a padding mode as torch's string.
inline const char* padding_mode_name(PaddingMode mode) {
  switch (mode) {
    case PaddingMode::Zeros:
      return "zeros";
    case PaddingMode::Reflect:
      return "reflect";
    case PaddingMode::Replicate:
      return "replicate";
    case PaddingMode::Circular:
      return "circular";
  }
  return "?";
}

// The input of a convolution whose padding_mode is not zeros: `input`
// padded by F::pad with `pad` ({left, right} or {left, right, top,
// bottom}) in that mode, F::pad's checks included.
inline Tensor pad_for_conv(const Tensor& input, const std::vector<int64_t>& pad, PaddingMode mode) {
  const functional::PadMode pad_mode = mode == PaddingMode::Reflect     ? functional::PadMode::Reflect
                                       : mode == PaddingMode::Replicate ? functional::PadMode::Replicate
                                                                        : functional::PadMode::Circular;
  return functional::pad(input, pad, pad_mode);
}

}  // namespace kiln::nn
