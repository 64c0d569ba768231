#include "nn/conv.h"

#include <string>

#include "nn/functional.h"
#include "nn/repr.h"
#include "nn/weight_layer.h"
#include "tensor/factory.h"

namespace kiln::nn {

namespace {

// What the convolution itself pads on each side: the before sides (Note
// [Same padding] in nn/conv_padding.h). For an uneven 'same' the params
// alone are not the layer (padded_by_params): quant's fuse and convert,
// which rebuild a convolution from them, refuse such a layer, as they refuse
// a padding_mode.
Size2d before_sides(const Conv2dPadding& padding, Size2d kernel_size, Size2d dilation) {
  const auto [h, w] = conv_padding_sides(padding, kernel_size, dilation);
  return {h.before, w.before};
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Size2d stride, Conv2dPadding padding,
               Size2d dilation, int64_t groups, bool bias, PaddingMode padding_mode)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      padding(padding),
      params{.stride = stride,
             .padding = before_sides(padding, kernel_size, dilation),
             .dilation = dilation,
             .groups = groups},
      padding_mode(padding_mode) {
  check_conv_channels("Conv2d", in_channels, out_channels, groups);
  check_conv_sizes("Conv2d", kernel_size, params);
  KILN_CHECK(padding.kind() != ConvPaddingKind::Same || stride == Size2d(1),
             "Conv2d: padding='same' is not supported for strided convolutions, got stride ", repr::pair(stride));
  weight = register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size.h, kernel_size.w}));
  this->bias = register_parameter("bias", bias ? empty({out_channels}) : Tensor());
  reset_parameters();
}

bool Conv2d::padded_by_params() const {
  const auto [h, w] = conv_padding_sides(padding, kernel_size, params.dilation);
  return padding_mode == PaddingMode::Zeros && h.before == h.after && w.before == w.after;
}

void Conv2d::reset_parameters() {
  reset_weight_and_bias_(weight, bias);
}

Tensor Conv2d::forward(const Tensor& input) {
  if (padding_mode == PaddingMode::Zeros) {
    if (padding.kind() != ConvPaddingKind::Same) return functional::conv2d(input, weight, bias, params);
    // F::conv2d pads same's extra after sides (Note [Same padding]).
    return functional::conv2d(input, weight, bias, params.stride, padding, params.dilation, params.groups);
  }
  KILN_CHECK(input.dim() == 3 || input.dim() == 4, "Conv2d: expected input of shape (N, C, H, W) or (C, H, W), got ",
             input.dim(), "D input of shape ", input.shape());
  // F::pad's order: the last dim (W) first; the convolution itself then pads nothing.
  const auto [h, w] = conv_padding_sides(padding, kernel_size, params.dilation);
  Conv2dParams unpadded = params;
  unpadded.padding = Size2d(0, 0);
  Tensor padded = pad_for_conv(input, {w.before, w.after, h.before, h.after}, padding_mode);
  return functional::conv2d(padded, weight, bias, unpadded);
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + repr::pair(kernel_size) + ", stride=" + repr::pair(params.stride);
  if (padding != Conv2dPadding(0)) s += ", padding=" + conv_padding_text(padding, repr::pair);
  if (params.dilation != Size2d(1)) s += ", dilation=" + repr::pair(params.dilation);
  if (params.groups != 1) s += ", groups=" + std::to_string(params.groups);
  if (!bias.defined()) s += ", bias=False";
  if (padding_mode != PaddingMode::Zeros) s += std::string(", padding_mode=") + padding_mode_name(padding_mode);
  return s;
}

}  // namespace kiln::nn
