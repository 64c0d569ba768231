#include "nn/conv.h"

#include <cmath>
#include <string>

#include "nn/functional.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride, Size2d padding,
               Size2d dilation, int64_t groups, bool bias)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups) {
  KILN_CHECK(groups > 0, "Conv2d: groups must be a positive integer, got ", groups);
  KILN_CHECK(in_channels > 0 && out_channels > 0, "Conv2d: in_channels and out_channels must be positive, got ",
             in_channels, " and ", out_channels);
  KILN_CHECK(in_channels % groups == 0, "Conv2d: in_channels (", in_channels, ") must be divisible by groups (", groups,
             ")");
  KILN_CHECK(out_channels % groups == 0, "Conv2d: out_channels (", out_channels, ") must be divisible by groups (",
             groups, ")");
  KILN_CHECK(kernel_size.h > 0 && kernel_size.w > 0 && stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0,
             "Conv2d: kernel_size, stride and dilation must be positive, got ", repr::pair(kernel_size), ", ",
             repr::pair(stride), " and ", repr::pair(dilation));
  KILN_CHECK(padding.h >= 0 && padding.w >= 0, "Conv2d: padding must be >= 0, got ", repr::pair(padding));
  weight = register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size.h, kernel_size.w}));
  this->bias = register_parameter("bias", bias ? empty({out_channels}) : Tensor());
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& input) {
  return functional::conv2d(input, weight, bias, stride, padding, dilation, groups);
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + repr::pair(kernel_size) + ", stride=" + repr::pair(stride);
  if (padding.h != 0 || padding.w != 0) s += ", padding=" + repr::pair(padding);
  if (dilation.h != 1 || dilation.w != 1) s += ", dilation=" + repr::pair(dilation);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace kiln::nn
