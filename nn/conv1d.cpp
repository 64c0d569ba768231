#include "nn/conv1d.h"

#include <string>

#include "nn/functional_composite.h"
#include "nn/repr.h"
#include "nn/weight_layer.h"
#include "tensor/factory.h"

namespace kiln::nn {

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, Conv1dPadding padding,
               int64_t dilation, int64_t groups, bool bias, PaddingMode padding_mode)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups),
      padding_mode(padding_mode) {
  check_conv_channels("Conv1d", in_channels, out_channels, groups);
  KILN_CHECK(kernel_size > 0 && stride > 0 && dilation > 0,
             "Conv1d: kernel_size, stride and dilation must be positive, got ", kernel_size, ", ", stride, " and ",
             dilation);
  if (padding.kind() == ConvPaddingKind::Same) {
    KILN_CHECK(stride == 1, "Conv1d: padding='same' is not supported for strided convolutions, got stride ", stride);
  } else {
    KILN_CHECK(padding.size() >= 0, "Conv1d: padding must be >= 0, got ", padding.size());
  }
  weight = register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size}));
  this->bias = register_parameter("bias", bias ? empty({out_channels}) : Tensor());
  reset_parameters();
}

void Conv1d::reset_parameters() {
  reset_weight_and_bias_(weight, bias);
}

Tensor Conv1d::forward(const Tensor& input) {
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, "Conv1d: expected input of shape (N, C, L) or (C, L), got ",
             input.dim(), "D input of shape ", input.shape());
  KILN_CHECK(input.size(-2) == in_channels, "Conv1d: expected ", in_channels, " input channels, got input of shape ",
             input.shape());
  // F::conv1d pads same's extra after side itself (Note [Same padding] in nn/conv_padding.h).
  if (padding_mode == PaddingMode::Zeros)
    return functional::conv1d(input, weight, bias, stride, padding, dilation, groups);
  const PadSides sides = conv_padding_sides(padding, kernel_size, dilation);
  return functional::conv1d(pad_for_conv(input, {sides.before, sides.after}, padding_mode), weight, bias, stride, 0,
                            dilation, groups);
}

std::string Conv1d::extra_repr() const {
  auto one = [](int64_t v) { return "(" + std::to_string(v) + ",)"; };
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + one(kernel_size) + ", stride=" + one(stride);
  if (padding != Conv1dPadding(0)) s += ", padding=" + conv_padding_text(padding, one);
  if (dilation != 1) s += ", dilation=" + one(dilation);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=False";
  if (padding_mode != PaddingMode::Zeros) s += std::string(", padding_mode=") + padding_mode_name(padding_mode);
  return s;
}

}  // namespace kiln::nn
