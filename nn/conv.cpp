#include "nn/conv.h"

#include <string>

#include "nn/functional.h"
#include "nn/repr.h"
#include "nn/weight_layer.h"
#include "tensor/factory.h"

namespace kiln::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride, Size2d padding,
               Size2d dilation, int64_t groups, bool bias, PaddingMode padding_mode)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      params{.stride = stride, .padding = padding, .dilation = dilation, .groups = groups},
      padding_mode(padding_mode) {
  check_conv_channels("Conv2d", in_channels, out_channels, groups);
  check_conv_sizes("Conv2d", kernel_size, params);
  weight = register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size.h, kernel_size.w}));
  this->bias = register_parameter("bias", bias ? empty({out_channels}) : Tensor());
  reset_parameters();
}

void Conv2d::reset_parameters() {
  reset_weight_and_bias_(weight, bias);
}

Tensor Conv2d::forward(const Tensor& input) {
  if (padding_mode == PaddingMode::Zeros) return functional::conv2d(input, weight, bias, params);
  KILN_CHECK(input.dim() == 3 || input.dim() == 4, "Conv2d: expected input of shape (N, C, H, W) or (C, H, W), got ",
             input.dim(), "D input of shape ", input.shape());
  // F::pad's order: the last dim (W) first; the convolution itself then pads nothing.
  const Size2d pad = params.padding;
  Conv2dParams unpadded = params;
  unpadded.padding = Size2d(0, 0);
  Tensor padded = pad_for_conv(input, {pad.w, pad.w, pad.h, pad.h}, padding_mode);
  return functional::conv2d(padded, weight, bias, unpadded);
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + repr::pair(kernel_size) + ", stride=" + repr::pair(params.stride);
  if (params.padding != Size2d(0)) s += ", padding=" + repr::pair(params.padding);
  if (params.dilation != Size2d(1)) s += ", dilation=" + repr::pair(params.dilation);
  if (params.groups != 1) s += ", groups=" + std::to_string(params.groups);
  if (!bias.defined()) s += ", bias=False";
  if (padding_mode != PaddingMode::Zeros) s += std::string(", padding_mode=") + padding_mode_name(padding_mode);
  return s;
}

}  // namespace kiln::nn
