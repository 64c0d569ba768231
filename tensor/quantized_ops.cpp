// Front-ends of the int8 conv, linear, add and cat (tensor/quantized_ops.h):
// check the operands, allocate the output on its grid, dispatch to the
// backend's quantized kernels (Note [Quantized kernel group]).
//
// The kernels read each operand's params from the tensor they are given.
// The tensors handed down are made here with the params set on them
// explicitly (with_params), rather than trusting whatever view or reshape
// produced them, so that what a kernel reads is exactly what was checked.
#include "tensor/quantized_ops.h"

#include <cmath>
#include <sstream>

#include "tensor/conv_shape.h"
#include "tensor/memory_layout.h"
#include "tensor/quant_math.h"
#include "tensor/quantize.h"

namespace kiln::ops {
namespace {

const QuantParams& params_of(const Tensor& t) { return *t.impl()->quant_params(); }

bool per_tensor(const Tensor& t) { return params_of(t).scheme == QuantParams::Scheme::PerTensor; }

// t's elements under a handle of their own carrying `params` (nullptr: none).
Tensor with_params(const Tensor& t, std::shared_ptr<const QuantParams> params) {
  auto impl = std::make_shared<TensorImpl>(t.storage(), t.dtype(), t.shape(), t.strides(), t.storage_offset(),
                                           t.impl()->version_counter());
  impl->set_quant_params(std::move(params));
  return Tensor(std::move(impl));
}

std::shared_ptr<const QuantParams> per_tensor_params(double scale, int64_t zero_point) {
  auto params = std::make_shared<QuantParams>();
  params->scales = {scale};
  params->zero_points = {zero_point};
  return params;
}

// What t is, for messages: "quint8 (quantized per tensor)", "float32".
std::string describe(const Tensor& t) {
  std::ostringstream s;
  if (t.is_quantized()) {
    s << quantized_dtype_name(t.dtype()) << (per_tensor(t) ? " (quantized per tensor)" : " (quantized per channel)");
  } else {
    s << dtype_name(t.dtype());
  }
  return s.str();
}

// x: the quint8 activation of a static conv or linear.
void check_activation(const Tensor& x, std::string_view op) {
  KILN_CHECK(x.defined(), op, ": input is undefined");
  KILN_CHECK(x.is_quantized(), op, ": expected a quantized quint8 input, got a ", describe(x),
             " tensor; quantize it first (ops::quantize_per_tensor), or use the dynamic form for a float input");
  KILN_CHECK(x.dtype() == DType::UInt8, op, ": expected a quint8 input, got ", describe(x),
             " (activations are quint8; qint8 is for weights)");
  KILN_CHECK(per_tensor(x), op, ": expected an input quantized per tensor, got one quantized per channel along dim ",
             params_of(x).axis);
}

// x: the float32 input of a dynamic conv or linear.
void check_float_input(const Tensor& x, std::string_view op) {
  KILN_CHECK(x.defined(), op, ": input is undefined");
  KILN_CHECK(!x.is_quantized(), op, ": expected a float32 input, got a ", describe(x),
             " tensor; the dynamic form quantizes its input itself (dequantize it, or use the static op)");
  KILN_CHECK(x.dtype() == DType::Float32, op, ": expected a float32 input, got ", x.dtype());
}

// The packed weight's device must be the input's; returns the weight.
const Tensor& check_weight(const PackedQuantizedWeight& w, const Tensor& x, int64_t dims, std::string_view op) {
  const Tensor& weight = w.weight();
  KILN_CHECK(weight.dim() == dims, op, ": expected a weight packed from a ", dims, "-d ",
             dims == 2 ? "(N, K) linear" : "(O, C/groups, kh, kw) conv", " weight, got shape ", weight.shape());
  KILN_CHECK(weight.device() == x.device(), op, ": input is on ", x.device(), " but the weight on ",
             weight.device());
  return weight;
}

// bias: float32 (n) or undefined -> a float32 (n) with unit stride, or undefined.
Tensor checked_bias(const Tensor& bias, int64_t n, const Tensor& x, std::string_view op) {
  if (!bias.defined()) return Tensor();
  KILN_CHECK(!bias.is_quantized() && bias.dtype() == DType::Float32, op,
             ": expected a float32 bias (quantized inside the op), got ", describe(bias));
  KILN_CHECK(bias.dim() == 1 && bias.size(0) == n, op, ": bias must have shape [", n, "], got ", bias.shape());
  KILN_CHECK(bias.device() == x.device(), op, ": input is on ", x.device(), " but the bias on ", bias.device());
  return bias.contiguous();
}

void check_output_grid(double scale, int64_t zero_point, DType dtype, std::string_view op) {
  const float scale_f = quant_math::scale_as_float(scale);
  KILN_CHECK(std::isfinite(scale) && scale > 0 && std::isfinite(scale_f) && scale_f > 0, op,
             ": output scale must be positive and finite in float32, got ", scale);
  const quant_math::QRange range = quant_math::qrange(dtype);
  KILN_CHECK(zero_point >= range.lo && zero_point <= range.hi, op, ": output zero point ", zero_point,
             " is outside the ", quantized_dtype_name(dtype), " range [", range.lo, ", ", range.hi, "]");
}

Tensor empty_quantized(const Shape& shape, double scale, int64_t zero_point, DType dtype, Device device) {
  Tensor out = Tensor::empty(shape, {dtype, device});
  out.impl()->set_quant_params(per_tensor_params(scale, zero_point));
  return out;
}

// x (..., K) with the params of `source` -> (M, K) with unit column stride.
Tensor as_rows(const Tensor& x, int64_t k, std::shared_ptr<const QuantParams> params) {
  Tensor rows = x.reshape({-1, k});
  if (rows.stride(1) != 1) rows = rows.contiguous();
  return with_params(rows, std::move(params));
}


// The conv's output shape, (N, O, oh, ow) or (O, oh, ow) for an unbatched x.
Shape conv_output_shape(const Tensor& x, int64_t out_channels, const Conv2dShape& s) {
  Shape shape{out_channels, s.output.h, s.output.w};
  if (x.dim() == 4) shape.insert(shape.begin(), x.size(0));
  return shape;
}

}  // namespace

std::shared_ptr<const PackedQuantizedWeight> pack_quantized_weight(const Tensor& weight) {
  constexpr std::string_view op = "pack_quantized_weight";
  KILN_CHECK(weight.defined(), op, ": weight is undefined");
  KILN_CHECK(weight.is_quantized(), op, ": expected a quantized qint8 weight, got a ", describe(weight),
             " tensor; quantize it first (ops::quantize_per_channel(w, scales, zero_points, 0, DType::Int8))");
  KILN_CHECK(weight.dtype() == DType::Int8, op, ": expected a qint8 weight, got ", describe(weight));
  KILN_CHECK(weight.dim() == 2 || weight.dim() == 4, op,
             ": expected a 2-d (N, K) linear or 4-d (O, C/groups, kh, kw) conv weight, got shape ", weight.shape());
  KILN_CHECK(weight.numel() > 0, op, ": weight of shape ", weight.shape(), " is empty");
  const QuantParams& params = params_of(weight);
  KILN_CHECK(params.scheme == QuantParams::Scheme::PerTensor || params.axis == 0, op,
             ": a per-channel weight must be quantized along dim 0 (output channels), got axis ", params.axis);
  for (size_t i = 0; i < params.zero_points.size(); ++i) {
    KILN_CHECK(params.zero_points[i] == 0, op, ": the weight must be symmetric (zero point 0), got zero point ",
               params.zero_points[i], params.scheme == QuantParams::Scheme::PerChannel ? " at channel " : "",
               params.scheme == QuantParams::Scheme::PerChannel ? std::to_string(i) : std::string());
  }
  for (size_t i = 0; i < params.scales.size(); ++i) {
    const float scale = quant_math::scale_as_float(params.scales[i]);
    KILN_CHECK(std::isfinite(scale) && scale > 0, op, ": weight scale ", params.scales[i], " (index ", i,
               ") is not positive and finite in float32");
  }
  return quantized_kernels_for(weight.device(), op).pack_weight(weight);
}

Tensor quantized_linear(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias, double out_scale,
                        int64_t out_zero_point, bool relu) {
  constexpr std::string_view op = "quantized linear";
  check_activation(x, op);
  const Tensor& weight = check_weight(w, x, 2, op);
  const int64_t n = weight.size(0), k = weight.size(1);
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == k, op, ": input of shape ", x.shape(), " does not end in ", k,
             ", the in_features of weight ", weight.shape());
  Tensor b = checked_bias(bias, n, x, op);
  check_output_grid(out_scale, out_zero_point, DType::UInt8, op);
  QuantizedKernels& kernels = quantized_kernels_for(x.device(), op);

  Tensor rows = as_rows(x, k, x.impl()->quant_params());  // (M, K)
  Tensor out = empty_quantized({rows.size(0), n}, out_scale, out_zero_point, DType::UInt8, x.device());  // (M, N)
  if (out.numel() > 0) kernels.linear(out, rows, w, b, relu);
  Shape shape = x.shape();
  shape.back() = n;
  return with_params(out.view(shape), out.impl()->quant_params());
}

Tensor quantized_linear_dynamic(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                                bool reduce_range) {
  constexpr std::string_view op = "quantized linear_dynamic";
  check_float_input(x, op);
  const Tensor& weight = check_weight(w, x, 2, op);
  const int64_t n = weight.size(0), k = weight.size(1);
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == k, op, ": input of shape ", x.shape(), " does not end in ", k,
             ", the in_features of weight ", weight.shape());
  Tensor b = checked_bias(bias, n, x, op);
  QuantizedKernels& kernels = quantized_kernels_for(x.device(), op);

  Tensor rows = as_rows(x, k, nullptr);                                // (M, K) float32
  Tensor out = Tensor::empty({rows.size(0), n}, {DType::Float32, x.device()});  // (M, N)
  if (out.numel() > 0) kernels.linear_dynamic(out, rows, w, b, reduce_range);
  Shape shape = x.shape();
  shape.back() = n;
  return out.view(shape);
}

Tensor quantized_conv2d(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias, const Conv2dParams& p,
                        double out_scale, int64_t out_zero_point, bool relu) {
  constexpr std::string_view op = "quantized conv2d";
  check_activation(x, op);
  const Tensor& weight = check_weight(w, x, 4, op);
  const Conv2dShape s = conv2d_group_shape(x, weight, p, op);
  Tensor b = checked_bias(bias, weight.size(0), x, op);
  check_output_grid(out_scale, out_zero_point, DType::UInt8, op);
  QuantizedKernels& kernels = quantized_kernels_for(x.device(), op);

  Shape shape = conv_output_shape(x, weight.size(0), s);
  if (x.dim() == 3) shape.insert(shape.begin(), 1);  // (N, O, oh, ow)
  Tensor out4 = kernels.conv2d_channels_last(w, p, s) ? empty_channels_last(shape, {DType::UInt8, x.device()})
                                                      : Tensor::empty(shape, {DType::UInt8, x.device()});
  out4.impl()->set_quant_params(per_tensor_params(out_scale, out_zero_point));
  if (out4.numel() > 0) {
    Tensor x4 = with_params(x.dim() == 3 ? x.unsqueeze(0) : x, x.impl()->quant_params());  // (N, C, H, W)
    kernels.conv2d(out4, x4, w, b, p, s, relu);
  }
  return x.dim() == 3 ? with_params(out4.squeeze(0), out4.impl()->quant_params()) : out4;
}

Tensor quantized_conv2d_dynamic(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                                const Conv2dParams& p, bool reduce_range) {
  constexpr std::string_view op = "quantized conv2d_dynamic";
  check_float_input(x, op);
  const Tensor& weight = check_weight(w, x, 4, op);
  const Conv2dShape s = conv2d_group_shape(x, weight, p, op);
  Tensor b = checked_bias(bias, weight.size(0), x, op);
  QuantizedKernels& kernels = quantized_kernels_for(x.device(), op);

  Tensor out = Tensor::empty(conv_output_shape(x, weight.size(0), s), {DType::Float32, x.device()});
  if (out.numel() > 0) {
    kernels.conv2d_dynamic(x.dim() == 3 ? out.unsqueeze(0) : out, x.dim() == 3 ? x.unsqueeze(0) : x, w, b, p, s,
                           reduce_range);
  }
  return out;
}

Tensor quantized_conv2d_add(const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                            const Conv2dParams& p, const QuantizedConvGrid& conv, const Tensor& residual,
                            double out_scale, int64_t out_zero_point, bool relu) {
  constexpr std::string_view op = "quantized conv2d_add";
  check_activation(x, op);
  const Tensor& weight = check_weight(w, x, 4, op);
  const Conv2dShape s = conv2d_group_shape(x, weight, p, op);
  Tensor b = checked_bias(bias, weight.size(0), x, op);
  check_output_grid(conv.scale, conv.zero_point, DType::UInt8, op);
  check_output_grid(out_scale, out_zero_point, DType::UInt8, op);
  KILN_CHECK(residual.defined(), op, ": the residual is undefined");
  QuantizedKernels& kernels = quantized_kernels_for(x.device(), op);

  // The fused form needs the kernel's channels-last output and a residual
  // laid out as that output; anything else (an NCHW conv, a residual of
  // another layout, dtype or shape) runs as the two ops, whose checks then
  // name what is wrong.
  const bool residual_fits = x.dim() == 4 && residual.is_quantized() && residual.dtype() == DType::UInt8 &&
                             per_tensor(residual) && residual.device() == x.device() &&
                             residual.shape() == conv_output_shape(x, weight.size(0), s) &&
                             kernels.conv2d_channels_last(w, p, s);
  Tensor out;
  if (residual_fits) out = empty_channels_last(residual.shape(), {DType::UInt8, x.device()});
  if (!residual_fits || residual.strides() != out.strides()) {
    Tensor y = quantized_conv2d(x, w, bias, p, conv.scale, conv.zero_point, conv.relu);
    return quantized_add(y, residual, out_scale, out_zero_point, relu);
  }
  out.impl()->set_quant_params(per_tensor_params(out_scale, out_zero_point));
  if (out.numel() > 0)
    kernels.conv2d_add(out, x, w, b, p, s, conv, with_params(residual, residual.impl()->quant_params()), relu);
  return out;
}

Tensor quantized_add(const Tensor& a, const Tensor& b, double out_scale, int64_t out_zero_point, bool relu) {
  constexpr std::string_view op = "quantized add";
  KILN_CHECK(a.defined() && b.defined(), op, ": a or b is undefined");
  KILN_CHECK(a.is_quantized() && b.is_quantized(), op, ": expected two quantized tensors, got ", describe(a),
             " and ", describe(b), "; quantize the float one first (ops::quantize_per_tensor)");
  KILN_CHECK(a.dtype() == b.dtype(), op, ": expected a and b of one dtype, got ", describe(a), " and ",
             describe(b));
  KILN_CHECK(per_tensor(a) && per_tensor(b), op, ": expected tensors quantized per tensor, got ", describe(a),
             " and ", describe(b));
  KILN_CHECK(a.shape() == b.shape(), op, ": expected a and b of one shape, got ", a.shape(), " and ", b.shape());
  KILN_CHECK(a.device() == b.device(), op, ": a is on ", a.device(), " but b on ", b.device());
  check_output_grid(out_scale, out_zero_point, a.dtype(), op);
  QuantizedKernels& kernels = quantized_kernels_for(a.device(), op);

  // Two operands laid out alike (a convolution's channels-last outputs, say)
  // give an output laid out as they are, and the kernel sees three flat runs
  // (Note [Channels-last quantized activations] in tensor/memory_layout.h).
  const bool alike = !a.is_contiguous() && a.strides() == b.strides() && dense_dim_order(a).has_value();
  Tensor out = alike ? empty_like_layout(a, {a.dtype(), a.device()}) : Tensor::empty(a.shape(), {a.dtype(), a.device()});
  out.impl()->set_quant_params(per_tensor_params(out_scale, out_zero_point));
  if (out.numel() == 0) return out;
  if (alike) {
    // flat_view carries each operand's own (checked, per-tensor) params.
    kernels.add(flat_view(out, op), flat_view(a, op), flat_view(b, op), relu);
  } else {
    kernels.add(out, with_params(a, a.impl()->quant_params()), with_params(b, b.impl()->quant_params()), relu);
  }
  return out;
}

Tensor quantized_cat(const std::vector<Tensor>& tensors, int64_t dim, double out_scale, int64_t out_zero_point) {
  constexpr std::string_view op = "quantized cat";
  KILN_CHECK(!tensors.empty(), op, ": expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    KILN_CHECK(t.is_quantized(), op, ": expected quantized tensors, got a ", describe(t), " tensor (tensor ", i,
               "); quantize it first (ops::quantize_per_tensor)");
    KILN_CHECK(per_tensor(t), op, ": expected tensors quantized per tensor, got ", describe(t), " (tensor ", i,
               ")");
    KILN_CHECK(t.dtype() == first.dtype(), op, ": expected tensors of one dtype, got ", describe(first),
               " (tensor 0) and ", describe(t), " (tensor ", i, ")");
    KILN_CHECK(t.device() == first.device(), op, ": expected tensors on one device, got ", first.device(),
               " (tensor 0) and ", t.device(), " (tensor ", i, ")");
    KILN_CHECK(t.dim() == first.dim() && t.dim() > 0, op, ": expected tensors with the same number of dims (> 0), got ",
               first.shape(), " (tensor 0) and ", t.shape(), " (tensor ", i, ")");
  }
  dim = wrap_dim(dim, first.dim(), op);
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (int64_t d = 0; d < first.dim(); ++d) {
      KILN_CHECK(d == dim || tensors[i].size(d) == first.size(d), op, ": sizes must match except in dim ", dim,
                 "; got ", first.shape(), " (tensor 0) and ", tensors[i].shape(), " (tensor ", i, ") at dim ", d);
    }
    total += tensors[i].size(dim);
  }
  check_output_grid(out_scale, out_zero_point, first.dtype(), op);
  QuantizedKernels& kernels = quantized_kernels_for(first.device(), op);

  Shape shape = first.shape();
  shape[dim] = total;
  Tensor out = empty_quantized(shape, out_scale, out_zero_point, first.dtype(), first.device());
  const float out_scale_f = quant_math::scale_as_float(out_scale);
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const int64_t length = t.size(dim);
    if (length == 0) continue;
    const Tensor slice = out.narrow(dim, offset, length);
    offset += length;
    if (t.numel() == 0) continue;
    const QuantParams& tp = params_of(t);
    if (quant_math::scale_as_float(tp.scales[0]) == out_scale_f && tp.zero_points[0] == out_zero_point) {
      // Already on the output grid (every rounding would give back the same
      // integer): a plain copy of the integers.
      with_params(slice, nullptr).copy_(with_params(t, nullptr));
    } else {
      kernels.requantize(with_params(slice, out.impl()->quant_params()), with_params(t, t.impl()->quant_params()));
    }
  }
  return out;
}

}  // namespace kiln::ops
