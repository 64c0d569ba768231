#include "nn/conv_transpose.h"

#include <string>

#include "nn/functional.h"
#include "nn/repr.h"
#include "nn/weight_layer.h"
#include "tensor/factory.h"

namespace kiln::nn {

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride,
                                 Size2d padding, Size2d output_padding, int64_t groups, bool bias, Size2d dilation)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      params{.stride = stride, .padding = padding, .dilation = dilation, .groups = groups},
      output_padding(output_padding) {
  check_conv_channels("ConvTranspose2d", in_channels, out_channels, groups);
  check_conv_sizes("ConvTranspose2d", kernel_size, params);
  KILN_CHECK(output_padding.h >= 0 && output_padding.w >= 0 &&
                 (output_padding.h < stride.h || output_padding.h < dilation.h) &&
                 (output_padding.w < stride.w || output_padding.w < dilation.w),
             "ConvTranspose2d: output_padding ", repr::pair(output_padding), " must be smaller than either stride ",
             repr::pair(stride), " or dilation ", repr::pair(dilation));
  weight = register_parameter("weight", empty({in_channels, out_channels / groups, kernel_size.h, kernel_size.w}));
  this->bias = register_parameter("bias", bias ? empty({out_channels}) : Tensor());
  reset_parameters();
}

// The weight's dim 1 is torch's fan_in here too, which is what
// reset_weight_and_bias_ computes.
void ConvTranspose2d::reset_parameters() { reset_weight_and_bias_(weight, bias); }

Tensor ConvTranspose2d::forward(const Tensor& input) {
  return functional::conv_transpose2d(input, weight, bias, params, output_padding);
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + repr::pair(kernel_size) + ", stride=" + repr::pair(params.stride);
  if (params.padding != Size2d(0)) s += ", padding=" + repr::pair(params.padding);
  if (params.dilation != Size2d(1)) s += ", dilation=" + repr::pair(params.dilation);
  if (output_padding != Size2d(0)) s += ", output_padding=" + repr::pair(output_padding);
  if (params.groups != 1) s += ", groups=" + std::to_string(params.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace kiln::nn
