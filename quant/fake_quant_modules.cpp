#include "quant/fake_quant_modules.h"

#include "autograd/custom_function.h"
#include "autograd/ops.h"
#include "nn/functional.h"
#include "nn/functional_modules.h"
#include "nn/pooling.h"
#include "quant/fake_quantize.h"
#include "quant/fuse.h"
#include "tensor/quant_math.h"
#include "tensor/quantize.h"
#include "tensor/quantized_ops.h"

namespace kiln::quant {

namespace F = nn::functional;

namespace {

// 1 where y rounds inside [lo, hi] on the grid, else 0: the straight-through
// estimator's mask (torch's fake_quantize backward).
Tensor in_range_mask(const Tensor& y, const QParams& grid) {
  Tensor yc = y.detach().to(DType::Float32).contiguous();
  Tensor mask = Tensor::empty(yc.shape(), TensorOptions(DType::Float32));
  float inv = quant_math::inverse_scale(quant_math::scale_as_float(grid.scales[0]));
  float zp = static_cast<float>(grid.zero_points[0]);
  const float* in = yc.data<float>();
  float* out = mask.data<float>();
  for (int64_t i = 0; i < yc.numel(); ++i) {
    float q = std::nearbyint(in[i] * inv) + zp;
    out[i] = (q >= static_cast<float>(grid.quant_min) && q <= static_cast<float>(grid.quant_max)) ? 1.0f : 0.0f;
  }
  return mask.to(y.dtype());
}

// Forward: `exact`, the int8 model's dequantized output. Backward: the
// gradient of y (the float op's output) masked to the grid's range.
struct IntExactOutput : autograd::Function<IntExactOutput> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& /*y: only for its gradient*/, const Tensor& exact,
                        const Tensor& mask) {
    ctx->save_for_backward({mask});
    return exact;
  }
  static nn::TensorList backward(autograd::AutogradContext* ctx, const nn::TensorList& grads) {
    Tensor mask = ctx->get_saved_variables()[0];
    return {mask.defined() ? grads[0] * mask : grads[0], Tensor(), Tensor()};
  }
};

// The int8-exact output of a layer whose float output is y (see the Note).
Tensor exact_output(const Tensor& y, const Tensor& exact, const QParams& grid, bool mask_range) {
  Tensor mask = mask_range && y.requires_grad() ? in_range_mask(y, grid) : Tensor();
  return with_grid(IntExactOutput::apply(y, exact, mask), grid);
}

std::shared_ptr<Observer> make_observer(const ObserverFactory& factory, const char* what,
                                            const std::string& name) {
  KILN_CHECK(factory != nullptr, "prepare: the qconfig of ", name, " has no ", what, " observer");
  auto observer = factory();
  KILN_CHECK(observer != nullptr, "prepare: the ", what, " observer factory of ", name, " returned null");
  return observer;
}

}  // namespace

// ---- FakeQuantModule ----

FakeQuantModule::FakeQuantModule(std::string name, const QConfig* qconfig) : qualified_name(std::move(name)) {
  if (qconfig != nullptr) {
    output_observer_ = register_module("activation_post_process",
                                       make_observer(qconfig->activation, "activation", qualified_name));
  }
}

std::string FakeQuantModule::where() const { return qualified_name + " (" + name() + ")"; }

QParams FakeQuantModule::input_grid(const Tensor& x, const char* which) const {
  KILN_CHECK(!x.is_quantized(), where(), ": its ", which, " is an int8 tensor; a prepared (fake-quantized) model takes float32 inputs");
  auto grid = grid_of(x);
  KILN_CHECK(grid.has_value(), where(), ": its ", which,
             " carries no quantization grid; fake quantization needs a QuantStub (or a quantized layer) before it");
  return *grid;
}

QParams FakeQuantModule::observe_output(const Tensor& y) {
  if (observer_enabled) (*output_observer_)(y.detach());
  return observer_qparams(*output_observer_, where());
}

// ---- FakeQuantConv2d ----

FakeQuantConv2d::FakeQuantConv2d(std::string name, const nn::Module& source, const QConfig& qconfig)
    : FakeQuantModule(std::move(name), &qconfig) {
  const nn::Conv2d* conv = dynamic_cast<const nn::Conv2d*>(&source);
  if (auto fused = dynamic_cast<const ConvBnReLU2d*>(&source)) {
    conv = fused->conv.get();
    bn = fused->bn;
    relu = fused->relu;
  }
  KILN_CHECK(conv != nullptr, "prepare: ", qualified_name, " (", source.name(), ") is not a Conv2d");
  check_padded_by_params("prepare", qualified_name, *conv);
  params = conv->params;
  weight = register_parameter("weight", conv->weight, conv->weight.requires_grad());
  bias = register_parameter("bias", conv->bias, conv->bias.defined() && conv->bias.requires_grad());
  if (bn) register_module("bn", bn);
  weight_observer = register_module("weight_fake_quant", make_observer(qconfig.weight, "weight", qualified_name));
}

std::pair<Tensor, Tensor> FakeQuantConv2d::folded_weight_bias() const {
  if (!bn) return {weight, bias};
  return fold_batch_norm(weight, bias, *bn);
}

QParams FakeQuantConv2d::weight_grid(const Tensor& folded_weight, bool observe) {
  if (observe || !weight_observer->has_statistics()) (*weight_observer)(folded_weight.detach());
  return observer_qparams(*weight_observer, where() + " weight");
}

Tensor FakeQuantConv2d::forward(const Tensor& x) {
  auto conv = [&](const Tensor& in, const Tensor& w, const Tensor& b) { return F::conv2d(in, w, b, params); };
  if (!fake_quant_enabled) {  // observing: the float layer, recorded
    Tensor y = conv(x, weight, bias);
    if (bn) y = (*bn)(y);
    if (relu) y = F::relu(y);
    if (observer_enabled) (*output_observer_)(y.detach());
    return y;
  }
  QParams gx = input_grid(x);
  if (bn && is_training() && !bn_frozen) {
    // QAT with live BatchNorm statistics, as torch's _ConvBnNd: the weight
    // is scaled by gamma / running_std before rounding, the conv's output
    // scaled back, and the BatchNorm normalises it with the batch's
    // statistics (and updates the running ones). A float simulation: the
    // int8-exact path needs fixed statistics, from freeze_bn_stats or eval.
    Tensor gamma = bn->affine ? bn->weight : ones_like(bn->running_var);
    Tensor factor = gamma * rsqrt(bn->running_var + bn->eps);
    Tensor w_scaled = weight * factor.reshape({-1, 1, 1, 1});
    QParams gw = weight_grid(w_scaled, observer_enabled);
    Tensor y = conv(x, fake_quantize_per_channel(w_scaled, gw.scales, gw.zero_points, 0, gw.quant_min, gw.quant_max), Tensor());
    y = y / factor.reshape({1, -1, 1, 1});
    if (bias.defined()) y = y + bias.reshape({1, -1, 1, 1});
    y = (*bn)(y);
    if (relu) y = F::relu(y);
    QParams gy = observe_output(y);
    return with_grid(fake_quantize(y, gy.scales[0], gy.zero_points[0], gy.quant_min, gy.quant_max), gy);
  }
  auto [w, b] = folded_weight_bias();
  QParams gw = weight_grid(w, observer_enabled);
  Tensor y = conv(x, fake_quantize_per_channel(w, gw.scales, gw.zero_points, 0, gw.quant_min, gw.quant_max), b);
  if (relu) y = F::relu(y);
  QParams gy = observe_output(y);
  Tensor exact;
  {
    NoGradGuard no_grad;
    Tensor xq = ops::quantize_per_tensor(x.detach(), gx.scales[0], gx.zero_points[0], DType::UInt8);
    auto packed = ops::pack_quantized_weight(ops::quantize(w.detach(), gw.quant_params(), DType::Int8));
    Tensor out = ops::quantized_conv2d(xq, *packed, b.defined() ? b.detach() : Tensor(), params, gy.scales[0],
                                       gy.zero_points[0], relu);
    exact = ops::dequantize(out);
  }
  return exact_output(y, exact, gy, /*mask_range=*/true);
}

// ---- FakeQuantLinear ----

FakeQuantLinear::FakeQuantLinear(std::string name, const nn::Module& source, const QConfig& qconfig)
    : FakeQuantModule(std::move(name), &qconfig) {
  const nn::Linear* linear = dynamic_cast<const nn::Linear*>(&source);
  if (auto fused = dynamic_cast<const LinearReLU*>(&source)) {
    linear = fused->linear.get();
    relu = true;
  }
  KILN_CHECK(linear != nullptr, "prepare: ", qualified_name, " (", source.name(), ") is not a Linear");
  weight = register_parameter("weight", linear->weight, linear->weight.requires_grad());
  bias = register_parameter("bias", linear->bias, linear->bias.defined() && linear->bias.requires_grad());
  weight_observer = register_module("weight_fake_quant", make_observer(qconfig.weight, "weight", qualified_name));
}

QParams FakeQuantLinear::weight_grid(bool observe) {
  if (observe || !weight_observer->has_statistics()) (*weight_observer)(weight.detach());
  return observer_qparams(*weight_observer, where() + " weight");
}

Tensor FakeQuantLinear::forward(const Tensor& x) {
  if (!fake_quant_enabled) {
    Tensor y = F::linear(x, weight, bias);
    if (relu) y = F::relu(y);
    if (observer_enabled) (*output_observer_)(y.detach());
    return y;
  }
  QParams gx = input_grid(x);
  QParams gw = weight_grid(observer_enabled);
  Tensor y = F::linear(x, fake_quantize_per_channel(weight, gw.scales, gw.zero_points, 0, gw.quant_min, gw.quant_max), bias);
  if (relu) y = F::relu(y);
  QParams gy = observe_output(y);
  Tensor exact;
  {
    NoGradGuard no_grad;
    Tensor xq = ops::quantize_per_tensor(x.detach(), gx.scales[0], gx.zero_points[0], DType::UInt8);
    auto packed = ops::pack_quantized_weight(ops::quantize(weight.detach(), gw.quant_params(), DType::Int8));
    exact = ops::dequantize(ops::quantized_linear(xq, *packed, bias.defined() ? bias.detach() : Tensor(), gy.scales[0],
                                                  gy.zero_points[0], relu));
  }
  return exact_output(y, exact, gy, /*mask_range=*/true);
}

// ---- FakeQuantAdd ----

FakeQuantAdd::FakeQuantAdd(std::string name, const QConfig& qconfig, bool with_relu)
    : FakeQuantModule(std::move(name), &qconfig), relu(with_relu) {}

nn::TensorList FakeQuantAdd::forward_many(const nn::TensorList& inputs) {
  KILN_CHECK(inputs.size() == 2, where(), ": takes two tensors, got ", inputs.size());
  const Tensor& a = inputs[0];
  const Tensor& b = inputs[1];
  if (!fake_quant_enabled) {
    Tensor y = relu ? nn::functional::relu(a + b) : a + b;
    if (observer_enabled) (*output_observer_)(y.detach());
    return {y};
  }
  QParams ga = input_grid(a, "first input");
  QParams gb = input_grid(b, "second input");
  Tensor y = relu ? nn::functional::relu(a + b) : a + b;
  QParams gy = observe_output(y);
  Tensor exact;
  {
    NoGradGuard no_grad;
    Tensor aq = ops::quantize_per_tensor(a.detach(), ga.scales[0], ga.zero_points[0], DType::UInt8);
    Tensor bq = ops::quantize_per_tensor(b.detach(), gb.scales[0], gb.zero_points[0], DType::UInt8);
    exact = ops::dequantize(ops::quantized_add(aq, bq, gy.scales[0], gy.zero_points[0], relu));
  }
  return {exact_output(y, exact, gy, /*mask_range=*/true)};
}

// ---- FakeQuantAvgPool2d ----

FakeQuantAvgPool2d::FakeQuantAvgPool2d(std::string name, std::shared_ptr<nn::Module> source)
    : FakeQuantModule(std::move(name), nullptr) {
  KILN_CHECK(std::dynamic_pointer_cast<nn::AvgPool2d>(source) || std::dynamic_pointer_cast<nn::AdaptiveAvgPool2d>(source),
             "prepare: ", qualified_name, " (", source->name(), ") is not an average pooling layer");
  pool = register_module("pool", std::move(source));
}

Tensor FakeQuantAvgPool2d::forward(const Tensor& x) {
  if (!fake_quant_enabled) return (*pool)(x);
  QParams gx = input_grid(x);
  Tensor y = (*pool)(x);
  Tensor exact;
  {
    NoGradGuard no_grad;
    Tensor xq = ops::quantize_per_tensor(x.detach(), gx.scales[0], gx.zero_points[0], DType::UInt8);
    exact = ops::dequantize((*pool)(xq));
  }
  // The average of values on the grid stays inside its range: no mask.
  return exact_output(y, exact, gx, /*mask_range=*/false);
}

// ---- FakeQuantFloatLayer ----

FakeQuantFloatLayer::FakeQuantFloatLayer(std::string name, std::shared_ptr<nn::Module> float_layer,
                                         const QConfig& qconfig)
    : FakeQuantModule(std::move(name), &qconfig) {
  layer = register_module("layer", std::move(float_layer));
}

Tensor FakeQuantFloatLayer::forward(const Tensor& x) {
  Tensor y = (*layer)(x);
  if (!fake_quant_enabled) {
    if (observer_enabled) (*output_observer_)(y.detach());
    return y;
  }
  input_grid(x);  // only to say so when the input is not fake-quantized
  QParams gy = observe_output(y);
  // The full range of the dtype, as the converted FloatLayer's quantize.
  auto range = quant_math::qrange(gy.dtype);
  return with_grid(fake_quantize(y, gy.scales[0], gy.zero_points[0], range.lo, range.hi), gy);
}

}  // namespace kiln::quant
