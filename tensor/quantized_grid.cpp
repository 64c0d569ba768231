// Note at tensor/quantized_grid.h: ops that keep their input's grid.
#include "tensor/quantized_grid.h"

#include <algorithm>

#include "tensor/elementwise.h"

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

Tensor quantized_relu(const Tensor& x) {
  const auto& params = x.impl()->quant_params();
  Tensor out = params->scheme == QuantParams::Scheme::PerTensor
                   ? clamp(x, Scalar(params->zero_points[0]), std::nullopt)
                   : maximum(x, zero_points_along_axis(x, *params));
  out.impl()->set_quant_params(params);
  return out;
}

Tensor& quantized_relu_(Tensor& x) {
  const auto& params = x.impl()->quant_params();
  if (params->scheme == QuantParams::Scheme::PerTensor) return clamp_(x, Scalar(params->zero_points[0]), std::nullopt);
  x.copy_(maximum(x, zero_points_along_axis(x, *params)));
  return x;
}

}  // namespace kiln::ops
