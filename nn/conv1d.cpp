#include "nn/conv1d.h"

#include <cmath>
#include <string>

#include "nn/functional_composite.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t padding,
               int64_t dilation, int64_t groups, bool bias)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups) {
  KILN_CHECK(groups > 0, "Conv1d: groups must be a positive integer, got ", groups);
  KILN_CHECK(in_channels > 0 && out_channels > 0, "Conv1d: in_channels and out_channels must be positive, got ",
             in_channels, " and ", out_channels);
  KILN_CHECK(in_channels % groups == 0, "Conv1d: in_channels (", in_channels, ") must be divisible by groups (", groups,
             ")");
  KILN_CHECK(out_channels % groups == 0, "Conv1d: out_channels (", out_channels, ") must be divisible by groups (",
             groups, ")");
  KILN_CHECK(kernel_size > 0 && stride > 0 && dilation > 0,
             "Conv1d: kernel_size, stride and dilation must be positive, got ", kernel_size, ", ", stride, " and ",
             dilation);
  KILN_CHECK(padding >= 0, "Conv1d: padding must be >= 0, got ", padding);
  weight = register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size}));
  this->bias = register_parameter("bias", bias ? empty({out_channels}) : Tensor());
  reset_parameters();
}

void Conv1d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv1d::forward(const Tensor& input) {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, "Conv1d: expected input of shape (N, C, L) or (C, L), got ",
             input.dim(), "D input of shape ", input.shape());
  KILN_CHECK(input.size(-2) == in_channels, "Conv1d: expected ", in_channels, " input channels, got input of shape ",
             input.shape());
  return functional::conv1d(input, weight, bias, stride, padding, dilation, groups);
}

std::string Conv1d::extra_repr() const {
  auto one = [](int64_t v) { return "(" + std::to_string(v) + ",)"; };
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + one(kernel_size) + ", stride=" + one(stride);
  if (padding != 0) s += ", padding=" + one(padding);
  if (dilation != 1) s += ", dilation=" + one(dilation);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace kiln::nn
