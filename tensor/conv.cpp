// Front-ends of im2col / col2im: validate the geometry against the tensors,
// allocate the result, dispatch (Note [Device dispatch]).
#include "tensor/conv.h"

namespace kiln {

// Rejects geometries with no valid output; `op` names the caller.
static void check_geometry(const ConvGeometry& g, std::string_view op) {
  KILN_CHECK(g.channels > 0 && g.height > 0 && g.width > 0, op, ": expected a positive input size, got C=",
             g.channels, " H=", g.height, " W=", g.width);
  KILN_CHECK(g.kernel_h > 0 && g.kernel_w > 0, op, ": kernel size must be positive, got ", g.kernel_h, " x ",
             g.kernel_w);
  KILN_CHECK(g.stride_h > 0 && g.stride_w > 0, op, ": stride must be positive, got ", g.stride_h, " x ",
             g.stride_w);
  KILN_CHECK(g.dilation_h > 0 && g.dilation_w > 0, op, ": dilation must be positive, got ", g.dilation_h, " x ",
             g.dilation_w);
  KILN_CHECK(g.pad_h >= 0 && g.pad_w >= 0, op, ": padding must be non-negative, got ", g.pad_h, " x ", g.pad_w);
  // Checked on the extents rather than on out_h()/out_w(): C++ division
  // truncates toward zero, so a kernel one step too large would still give
  // an output size of 1.
  int64_t extent_h = g.dilation_h * (g.kernel_h - 1) + 1;
  int64_t extent_w = g.dilation_w * (g.kernel_w - 1) + 1;
  KILN_CHECK(extent_h <= g.height + 2 * g.pad_h && extent_w <= g.width + 2 * g.pad_w, op, ": kernel ", g.kernel_h,
             " x ", g.kernel_w, " with dilation ", g.dilation_h, " x ", g.dilation_w, " spans ", extent_h, " x ",
             extent_w, ", more than the padded input ", g.height + 2 * g.pad_h, " x ", g.width + 2 * g.pad_w,
             " (output size would be < 1)");
}

Tensor im2col(const Tensor& x, int64_t kernel_h, int64_t kernel_w, int64_t stride, int64_t padding,
              int64_t dilation) {
  KILN_CHECK(x.defined(), "im2col: x is undefined");
  KILN_CHECK(x.dim() == 4, "im2col: expected a 4-d input (N, C, H, W), got shape ", x.shape());
  ConvGeometry g{x.size(1), x.size(2), x.size(3), kernel_h, kernel_w};
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = padding;
  g.dilation_h = g.dilation_w = dilation;
  return im2col(x, g);
}

Tensor im2col(const Tensor& x, const ConvGeometry& g) {
  KILN_CHECK(x.defined(), "im2col: x is undefined");
  KILN_CHECK(x.dim() == 4, "im2col: expected a 4-d input (N, C, H, W), got shape ", x.shape());
  KILN_CHECK(x.size(1) == g.channels && x.size(2) == g.height && x.size(3) == g.width, "im2col: input shape ",
             x.shape(), " does not match the geometry's (C, H, W) = (", g.channels, ", ", g.height, ", ", g.width,
             ")");
  check_geometry(g, "im2col");
  // cols: (N, C*kh*kw, oh*ow)
  Tensor cols = Tensor::empty({x.size(0), g.channels * g.kernel_h * g.kernel_w, g.out_h() * g.out_w()},
                              {x.dtype(), x.device()});
  if (cols.numel() > 0) backend_for(x.device()).im2col(cols, x, g);
  return cols;
}

Tensor col2im(const Tensor& cols, const ConvGeometry& g) {
  KILN_CHECK(cols.defined(), "col2im: cols is undefined");
  check_geometry(g, "col2im");
  int64_t rows = g.channels * g.kernel_h * g.kernel_w;
  int64_t positions = g.out_h() * g.out_w();
  KILN_CHECK(cols.dim() == 3 && cols.size(1) == rows && cols.size(2) == positions,
             "col2im: expected cols of shape [N, ", rows, ", ", positions, "] (C*kh*kw, oh*ow) for the geometry, got ",
             cols.shape());
  // x: (N, C, H, W)
  Tensor x = Tensor::empty({cols.size(0), g.channels, g.height, g.width}, {cols.dtype(), cols.device()});
  if (x.numel() > 0) backend_for(cols.device()).col2im(x, cols, g);
  return x;
}

}  // namespace kiln
