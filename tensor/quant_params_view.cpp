// Note [Quantization parameters through views] (quant_params_view.h).
#include "tensor/quant_params_view.h"

namespace kiln::quant_view {
namespace {

bool per_channel(const Params& params) {
  return params != nullptr && params->scheme == QuantParams::Scheme::PerChannel;
}

Params with_axis(const QuantParams& p, int64_t axis) {
  if (axis == p.axis) return std::make_shared<QuantParams>(p);
  auto out = std::make_shared<QuantParams>(p);
  out->axis = axis;
  return out;
}

}  // namespace

Params permuted(const Params& params, const Shape& dims) {
  if (!per_channel(params)) return params;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == params->axis) return params->axis == static_cast<int64_t>(i) ? params : with_axis(*params, i);
  }
  KILN_FAIL("permute: the per-channel axis ", params->axis, " is not among the dims ", dims);
}

Params sliced(const Params& params, int64_t dim, int64_t start, int64_t step, int64_t size) {
  if (!per_channel(params) || dim != params->axis) return params;
  auto out = std::make_shared<QuantParams>(*params);
  out->scales.clear();
  out->zero_points.clear();
  for (int64_t i = 0; i < size; ++i) {
    out->scales.push_back(params->scales[start + i * step]);
    out->zero_points.push_back(params->zero_points[start + i * step]);
  }
  return out;
}

Params dim_removed(const Params& params, int64_t dim, std::string_view op) {
  if (!per_channel(params)) return params;
  KILN_CHECK(dim != params->axis, op, ": dim ", dim, " is the channel axis of per-channel quantization parameters (",
             params->scales.size(), " channels); removing it leaves no channel to read a scale from (dequantize "
             "first, or take the view of int_repr())");
  return dim < params->axis ? with_axis(*params, params->axis - 1) : params;
}

Params dim_inserted(const Params& params, int64_t dim) {
  if (!per_channel(params)) return params;
  return dim <= params->axis ? with_axis(*params, params->axis + 1) : params;
}

Params expanded(const Params& params, const Shape& base_shape, const Shape& sizes) {
  if (!per_channel(params)) return params;
  int64_t axis = params->axis + static_cast<int64_t>(sizes.size() - base_shape.size());
  int64_t channels = sizes[axis];
  if (base_shape[params->axis] == channels) return axis == params->axis ? params : with_axis(*params, axis);
  // A 1-channel axis stretched: every index reads the one channel's scale.
  auto out = std::make_shared<QuantParams>(*params);
  out->axis = axis;
  out->scales.assign(channels, params->scales[0]);
  out->zero_points.assign(channels, params->zero_points[0]);
  return out;
}

Params reshaped(const Params& params, const Shape& old_shape, const Shape& new_shape, std::string_view op) {
  if (!per_channel(params)) return params;
  int64_t before = 1;  // elements before the axis, per index of the axis
  for (int64_t d = 0; d < params->axis; ++d) before *= old_shape[d];
  int64_t channels = old_shape[params->axis];
  int64_t prefix = 1;
  for (size_t d = 0; d < new_shape.size(); ++d) {
    if (prefix == before && new_shape[d] == channels) return with_axis(*params, static_cast<int64_t>(d));
    prefix *= new_shape[d];
  }
  KILN_FAIL(op, ": shape ", new_shape, " merges or splits dim ", params->axis, " of shape ", old_shape,
            ", the channel axis of per-channel quantization parameters; the elements would lose their channel "
            "(keep the axis as a dim of its own, or dequantize first)");
}

Params restrided(const Params& params, const Tensor& base, const Shape& sizes, const Shape& strides,
                 int64_t offset) {
  if (!per_channel(params)) return params;
  KILN_CHECK(sizes == base.shape() && strides == base.strides() && offset == base.storage_offset(),
             "as_strided: a tensor with per-channel quantization parameters (axis ", params->axis,
             ") can only be viewed with its own sizes, strides and offset; other geometries leave its elements "
             "without a known channel (dequantize first, or take the view of int_repr())");
  return params;
}

}  // namespace kiln::quant_view
