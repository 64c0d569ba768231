// Front-ends of quantize, dequantize, int_repr and requantize: check the
// arguments, allocate the output with the QuantParams it must carry, and
// call the device's quantized kernels (Note [Quantized kernel group]).
#include "tensor/quantize.h"

#include <cmath>

#include "tensor/backend.h"
#include "tensor/quant_math.h"
#include "tensor/quantized_kernels.h"

namespace kiln::ops {
namespace {

void check_quantized_dtype(DType dtype, std::string_view op) {
  KILN_CHECK(dtype == DType::UInt8 || dtype == DType::Int8 || dtype == DType::Int32, op, ": dtype ", dtype,
             " cannot hold quantized values (expected uint8 for quint8, int8 for qint8 or int32 for qint32)");
}

// A scale the float32 arithmetic of Note [Quantization arithmetic] can use:
// positive and finite as a double, and still so as a float32 and as its
// float32 inverse (1e-40 is a positive double whose inverse is inf in float).
void check_scale(double scale, std::string_view op, std::string_view what) {
  KILN_CHECK(std::isfinite(scale) && scale > 0, op, ": ", what, " must be positive and finite, got ", scale);
  float s = quant_math::scale_as_float(scale);
  KILN_CHECK(std::isfinite(s) && s > 0 && std::isfinite(quant_math::inverse_scale(s)), op, ": ", what, " ", scale,
             " is outside float32's range (quantization computes in float32: its scale and 1/scale must be finite"
             " and non-zero there)");
}

void check_zero_point(int64_t zero_point, DType dtype, std::string_view op, std::string_view what) {
  quant_math::QRange range = quant_math::qrange(dtype);
  KILN_CHECK(zero_point >= range.lo && zero_point <= range.hi, op, ": ", what, " ", zero_point, " is outside ",
             quantized_dtype_name(dtype), "'s range [", range.lo, ", ", range.hi, "]");
}

// Every rule a QuantParams must satisfy to describe a tensor of `shape` and
// `dtype`.
void check_params(const QuantParams& p, const Shape& shape, DType dtype, std::string_view op) {
  KILN_CHECK(p.scales.size() == p.zero_points.size(), op, ": ", p.scales.size(), " scales but ",
             p.zero_points.size(), " zero points");
  if (p.scheme == QuantParams::Scheme::PerTensor) {
    KILN_CHECK(p.scales.size() == 1, op, ": per-tensor parameters hold one scale, got ", p.scales.size());
  } else {
    int64_t rank = static_cast<int64_t>(shape.size());
    KILN_CHECK(p.axis >= 0 && p.axis < rank, op, ": per-channel axis ", p.axis, " is out of range for shape ",
               shape);
    KILN_CHECK(static_cast<int64_t>(p.scales.size()) == shape[p.axis], op, ": ", p.scales.size(),
               " per-channel scales for axis ", p.axis, " of size ", shape[p.axis], " (shape ", shape, ")");
  }
  for (size_t i = 0; i < p.scales.size(); ++i) {
    bool per_tensor = p.scheme == QuantParams::Scheme::PerTensor;
    std::string what = per_tensor ? "scale" : "scale of channel " + std::to_string(i);
    check_scale(p.scales[i], op, what);
    check_zero_point(p.zero_points[i], dtype, op,
                     per_tensor ? "zero point" : "zero point of channel " + std::to_string(i));
  }
}

// x as the float32 tensor the kernels read.
Tensor float_input(const Tensor& x, std::string_view op) {
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  KILN_CHECK(!x.is_quantized(), op, ": the input is already quantized (", quantized_dtype_name(x.dtype()),
             "); dequantize it first, or requantize it onto another grid");
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating point input, got ", x.dtype());
  return x.to(DType::Float32);
}

std::string_view quantize_op_name(const QuantParams& p) {
  return p.scheme == QuantParams::Scheme::PerTensor ? "quantize_per_tensor" : "quantize_per_channel";
}

Tensor quantize_checked(const Tensor& x, std::shared_ptr<const QuantParams> params, DType dtype,
                        std::string_view op, std::optional<quant_math::QRange> range = std::nullopt) {
  Tensor in = float_input(x, op);
  QuantizedKernels& kernels = quantized_kernels_for(in.device(), op);
  Tensor out = Tensor::empty(in.shape(), {dtype, in.device()});
  out.impl()->set_quant_params(std::move(params));
  const quant_math::QRange r = range.value_or(quant_math::qrange(dtype));
  if (out.numel() > 0) kernels.quantize(out, in, r.lo, r.hi);
  return out;
}

}  // namespace

std::string_view quantized_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::UInt8: return "quint8";
    case DType::Int8: return "qint8";
    case DType::Int32: return "qint32";
    default: KILN_FAIL("quantized_dtype_name: ", dtype, " is not a quantized dtype (uint8, int8 or int32)");
  }
}

Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype) {
  check_quantized_dtype(dtype, "quantize_per_tensor");
  const quant_math::QRange full = quant_math::qrange(dtype);
  return quantize_per_tensor(x, scale, zero_point, dtype, full.lo, full.hi);
}

Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype, int64_t quant_min,
                           int64_t quant_max) {
  constexpr std::string_view op = "quantize_per_tensor";
  check_quantized_dtype(dtype, op);
  check_scale(scale, op, "scale");
  check_zero_point(zero_point, dtype, op, "zero point");
  const quant_math::QRange full = quant_math::qrange(dtype);
  KILN_CHECK(full.lo <= quant_min && quant_min <= quant_max && quant_max <= full.hi, op, ": the range [", quant_min,
             ", ", quant_max, "] is not inside ", quantized_dtype_name(dtype), "'s [", full.lo, ", ", full.hi, "]");
  auto params = std::make_shared<QuantParams>();
  params->scales = {scale};
  params->zero_points = {zero_point};
  return quantize_checked(x, std::move(params), dtype, op,
                          quant_math::QRange{static_cast<int32_t>(quant_min), static_cast<int32_t>(quant_max)});
}

Tensor quantize_per_channel(const Tensor& x, std::vector<double> scales, std::vector<int64_t> zero_points,
                            int64_t axis, DType dtype) {
  constexpr std::string_view op = "quantize_per_channel";
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  check_quantized_dtype(dtype, op);
  KILN_CHECK(x.dim() > 0, op, ": a 0-dim tensor has no channel axis");
  KILN_CHECK(axis >= -x.dim() && axis < x.dim(), op, ": axis ", axis, " is out of range for a tensor of shape ",
             x.shape());
  if (axis < 0) axis += x.dim();
  KILN_CHECK(static_cast<int64_t>(scales.size()) == x.size(axis), op, ": got ", scales.size(),
             " scales for axis ", axis, " of size ", x.size(axis), " (shape ", x.shape(), ")");
  KILN_CHECK(zero_points.size() == scales.size(), op, ": got ", scales.size(), " scales but ", zero_points.size(),
             " zero points");
  auto params = std::make_shared<QuantParams>();
  params->scheme = QuantParams::Scheme::PerChannel;
  params->scales = std::move(scales);
  params->zero_points = std::move(zero_points);
  params->axis = axis;
  check_params(*params, x.shape(), dtype, op);
  return quantize_checked(x, std::move(params), dtype, op);
}

Tensor quantize(const Tensor& x, std::shared_ptr<const QuantParams> params, DType dtype) {
  KILN_CHECK(params != nullptr, "quantize: the parameters are null");
  std::string_view op = quantize_op_name(*params);
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  check_quantized_dtype(dtype, op);
  check_params(*params, x.shape(), dtype, op);
  return quantize_checked(x, std::move(params), dtype, op);
}

Tensor dequantize(const Tensor& q) {
  check_quantized(q, "dequantize", "input");
  QuantizedKernels& kernels = quantized_kernels_for(q.device(), "dequantize");
  Tensor out = Tensor::empty(q.shape(), {DType::Float32, q.device()});
  if (out.numel() > 0) kernels.dequantize(out, q);
  return out;
}

Tensor int_repr(const Tensor& q) {
  check_quantized(q, "int_repr", "input");
  Tensor out = Tensor::empty(q.shape(), {q.dtype(), q.device()});
  if (out.numel() > 0) backend_for(q.device()).copy(out, q);
  return out;
}

Tensor requantize(const Tensor& q, double scale, int64_t zero_point) {
  constexpr std::string_view op = "requantize";
  check_quantized(q, op, "input");
  check_scale(scale, op, "scale");
  check_zero_point(zero_point, q.dtype(), op, "zero point");
  QuantizedKernels& kernels = quantized_kernels_for(q.device(), op);
  auto params = std::make_shared<QuantParams>();
  params->scales = {scale};
  params->zero_points = {zero_point};
  Tensor out = Tensor::empty(q.shape(), {q.dtype(), q.device()});
  out.impl()->set_quant_params(std::move(params));
  if (out.numel() > 0) kernels.requantize(out, q);
  return out;
}

namespace {

// The per-tensor params of q, for q_scale and q_zero_point.
const QuantParams& per_tensor_params(const Tensor& q, std::string_view op) {
  KILN_CHECK(q.defined(), op, ": the tensor is undefined");
  const auto& params = q.impl()->quant_params();
  KILN_CHECK(params != nullptr, op, ": the tensor (", q.dtype(), ") carries no quantization parameters");
  KILN_CHECK(params->scheme == QuantParams::Scheme::PerTensor, op, ": the tensor is quantized per channel (",
             params->scales.size(), " scales along axis ", params->axis, "); it has no single scale and zero point");
  return *params;
}

}  // namespace

double q_scale(const Tensor& q, std::string_view op) { return per_tensor_params(q, op).scales[0]; }

int64_t q_zero_point(const Tensor& q, std::string_view op) { return per_tensor_params(q, op).zero_points[0]; }

void check_quantized(const Tensor& t, std::string_view op, std::string_view what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is undefined");
  KILN_CHECK(t.is_quantized(), op, ": ", what, " is not a quantized tensor (", t.dtype(),
             t.impl()->quant_params() ? " carrying quantization parameters" : "",
             "); quantize it first (quantize_per_tensor or quantize_per_channel)");
}

void check_not_quantized(const Tensor& t, std::string_view op, std::string_view what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is undefined");
  KILN_CHECK(!t.is_quantized(), op, ": ", what, " is a quantized tensor (", quantized_dtype_name(t.dtype()),
             "); dequantize it first");
}

}  // namespace kiln::ops
