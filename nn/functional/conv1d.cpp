// conv1d as conv2d on a height-1 image (Note [Composite layers] in
// nn/functional_composite.h). Its own checks come first, so that a bad call
// is reported in conv1d's terms rather than those of the 4-d view.
#include "nn/functional.h"
#include "nn/functional_composite.h"

namespace kiln::nn::functional {

namespace {

Tensor conv1d_padded(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                     int64_t dilation, int64_t groups) {
  KILN_CHECK(x.defined() && weight.defined(), "conv1d: x or weight is undefined");
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "conv1d: expected x of shape (N, C, L) or (C, L), got ", x.shape());
  KILN_CHECK(weight.dim() == 3, "conv1d: expected a 3-d weight (OC, C/groups, k), got shape ", weight.shape());
  KILN_CHECK(groups > 0, "conv1d: groups must be positive, got ", groups);
  KILN_CHECK(stride > 0 && dilation > 0, "conv1d: stride and dilation must be positive, got ", stride, " and ",
             dilation);
  KILN_CHECK(padding >= 0, "conv1d: padding must be non-negative, got ", padding);
  // An unbatched x is a batch of one.
  if (x.dim() == 2) return conv1d_padded(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0);
  KILN_CHECK(x.size(1) == weight.size(1) * groups, "conv1d: x of shape ", x.shape(), " has ", x.size(1),
             " channels, but weight of shape ", weight.shape(), " with groups=", groups, " expects ",
             weight.size(1) * groups);
  const int64_t extent = dilation * (weight.size(2) - 1) + 1;
  KILN_CHECK(extent <= x.size(2) + 2 * padding, "conv1d: kernel ", weight.size(2), " with dilation ", dilation,
             " spans ", extent, " positions, more than the ", x.size(2) + 2 * padding,
             " of x of shape ", x.shape(), " with padding ", padding);
  // x: (N, C, 1, L), weight: (OC, C/groups, 1, k) -> (N, OC, 1, ol). The
  // settings along L are those of the view's width (Note [One convolution
  // parameter struct] in tensor/conv.h).
  const Conv2dParams p{.stride = {1, stride}, .padding = {0, padding}, .dilation = {1, dilation}, .groups = groups};
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, p).squeeze(2);
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, Conv1dPadding padding,
              int64_t dilation, int64_t groups) {
  if (padding.kind() != ConvPaddingKind::Same)
    return conv1d_padded(x, weight, bias, stride, padding.size(), dilation, groups);
  KILN_CHECK(x.defined() && weight.defined(), "conv1d: x or weight is undefined");
  KILN_CHECK(weight.dim() == 3, "conv1d: expected a 3-d weight (OC, C/groups, k), got shape ", weight.shape());
  KILN_CHECK(stride == 1, "conv1d: padding='same' is not supported for strided convolutions, got stride ", stride);
  // The convolution pads the before side; an uneven total pads the one
  // more after it first, with zeros (Note [Same padding] in nn/conv_padding.h).
  const PadSides sides = conv_padding_sides(padding, weight.size(2), dilation);
  const Tensor padded = sides.after == sides.before ? x : functional::pad(x, {0, sides.after - sides.before});
  return conv1d_padded(padded, weight, bias, stride, sides.before, dilation, groups);
}

}  // namespace kiln::nn::functional
