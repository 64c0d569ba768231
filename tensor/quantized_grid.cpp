// Note at tensor/quantized_grid.h: ops that keep their input's grid.
#include "tensor/quantized_grid.h"

#include <algorithm>

#include "tensor/backend.h"
#include "tensor/elementwise.h"
#include "tensor/memory_layout.h"

namespace kiln::ops {
namespace {

// The zero points of per-channel params as a tensor of x's dtype and device
// that broadcasts against x: size C along the axis, 1 elsewhere.
Tensor zero_points_along_axis(const Tensor& x, const QuantParams& p) {
  Shape shape(static_cast<size_t>(x.dim()), 1);
  shape[p.axis] = static_cast<int64_t>(p.zero_points.size());
  Tensor zp = Tensor::empty(shape, DType::Int64);
  std::copy(p.zero_points.begin(), p.zero_points.end(), zp.data<int64_t>());
  return zp.to(x.dtype(), x.device());
}

}  // namespace

Tensor keep_grid(const Tensor& x, Tensor out) {
  const auto& params = x.impl()->quant_params();
  if (params && x.is_floating_point() && params->scheme == QuantParams::Scheme::PerTensor) {
    out.impl()->set_quant_params(params);
  }
  return out;
}

// Per tensor, relu clamps at the zero point. A dense x (a convolution's
// channels-last output among them) keeps its layout and is clamped as one
// flat run (Note [Channels-last quantized activations] in
// tensor/memory_layout.h); any other layout goes through the strided loop.
Tensor quantized_relu(const Tensor& x) {
  const auto& params = x.impl()->quant_params();
  if (params->scheme == QuantParams::Scheme::PerChannel) {
    Tensor out = maximum(x, zero_points_along_axis(x, *params));
    out.impl()->set_quant_params(params);
    return out;
  }
  const Scalar zero(params->zero_points[0]);
  Tensor out;
  if (!x.is_contiguous() && dense_dim_order(x)) {
    out = empty_like_layout(x, {x.dtype(), x.device()});
    if (out.numel() > 0) backend_for(x.device()).clamp(flat_view(out, "relu"), flat_view(x, "relu"), zero, std::nullopt);
  } else {
    out = clamp(x, zero, std::nullopt);
  }
  out.impl()->set_quant_params(params);
  return out;
}

Tensor& quantized_relu_(Tensor& x) {
  const auto& params = x.impl()->quant_params();
  if (params->scheme == QuantParams::Scheme::PerTensor) {
    const Scalar zero(params->zero_points[0]);
    if (x.is_contiguous() || !dense_dim_order(x)) return clamp_(x, zero, std::nullopt);
    Tensor flat = flat_view(x, "relu_");  // a view: its version counter is x's
    clamp_(flat, zero, std::nullopt);
    return x;
  }
  x.copy_(maximum(x, zero_points_along_axis(x, *params)));
  return x;
}

}  // namespace kiln::ops
