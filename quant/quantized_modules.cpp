#include "quant/quantized_modules.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "tensor/quantize.h"
#include "tensor/quantized_ops.h"

namespace kiln::quant {

namespace {

Tensor scalar_buffer(double value) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Float64));
  t.data<double>()[0] = value;
  return t;
}

Tensor scalar_buffer(int64_t value) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Int64));
  t.data<int64_t>()[0] = value;
  return t;
}

void check_weight(const Tensor& weight, int64_t dim, const std::string& where) {
  KILN_CHECK(weight.defined() && weight.is_quantized() && weight.dtype() == DType::Int8 && weight.dim() == dim, where,
             ": the weight must be a ", dim, "-d qint8 tensor");
}

// Takes the quantization params of a loaded weight before load_state_dict
// copies its integers in (a copy moves values, not params), and repacks
// after: the module's weight then is the file's, scales included.
template <class M>
void keep_loaded_weight_params(M& module) {
  module.register_load_state_dict_pre_hook([&module](nn::Module&, TensorDict& state, const std::string& prefix) {
    if (!state.contains(prefix + "weight")) return;
    const Tensor& loaded = state.at(prefix + "weight");
    KILN_CHECK(loaded.is_quantized() && loaded.dtype() == DType::Int8 && loaded.shape() == module.weight.shape(),
               "load_state_dict: ", prefix, "weight must be a qint8 tensor of shape ", module.weight.shape(),
               " with its quantization params, got ", loaded.dtype(), " ", loaded.shape(),
               loaded.is_quantized() ? "" : " without params");
    module.weight.impl()->set_quant_params(loaded.impl()->quant_params());
  });
  module.register_load_state_dict_post_hook([&module](nn::Module&, nn::IncompatibleKeys&) { module.repack(); });
}

std::string conv_repr(const Tensor& weight, const Conv2dParams& p) {
  std::ostringstream os;
  os << weight.size(1) * p.groups << ", " << weight.size(0) << ", kernel_size=(" << weight.size(2) << ", "
     << weight.size(3) << "), stride=(" << p.stride.h << ", " << p.stride.w << ")";
  if (p.padding != Size2d(0)) os << ", padding=(" << p.padding.h << ", " << p.padding.w << ")";
  if (p.dilation != Size2d(1)) os << ", dilation=(" << p.dilation.h << ", " << p.dilation.w << ")";
  if (p.groups != 1) os << ", groups=" << p.groups;
  return os.str();
}

}  // namespace

// ---- QuantizedModule ----

QuantizedModule::QuantizedModule(std::string name, double scale, int64_t zero_point) : qualified_name(std::move(name)) {
  scale_ = register_buffer("scale", scalar_buffer(scale));
  zero_point_ = register_buffer("zero_point", scalar_buffer(zero_point));
}

double QuantizedModule::scale() const { return scale_.data<double>()[0]; }
int64_t QuantizedModule::zero_point() const { return zero_point_.data<int64_t>()[0]; }

std::string QuantizedModule::where() const {
  return (qualified_name.empty() ? std::string("<root>") : qualified_name) + " (" + name() + ")";
}

void QuantizedModule::check_quantized_input(const Tensor& x, const char* which) const {
  KILN_CHECK(x.defined() && x.is_quantized() && x.dtype() == DType::UInt8, where(), ": expected a quint8 ", which,
             ", got ", x.defined() ? (x.is_quantized() ? std::string(ops::quantized_dtype_name(x.dtype()))
                                                       : std::string(dtype_name(x.dtype())))
                                   : std::string("an undefined tensor"),
             x.defined() && !x.is_quantized() ? " tensor; is a QuantStub missing before it?" : "");
}

// ---- Quantize / DeQuantize ----

Quantize::Quantize(std::string name, double scale, int64_t zero_point, int64_t qmin, int64_t qmax)
    : QuantizedModule(std::move(name), scale, zero_point), quant_min(qmin), quant_max(qmax) {}

Tensor Quantize::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.is_floating_point() && !x.is_quantized(), where(), ": expected a float input, got ",
             x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  return ops::quantize_per_tensor(x, scale(), zero_point(), DType::UInt8, quant_min, quant_max);
}

DeQuantize::DeQuantize(std::string name) : qualified_name(std::move(name)) {}

Tensor DeQuantize::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.is_quantized(), qualified_name, " (DeQuantize): expected a quantized input, got ",
             x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  return ops::dequantize(x);
}

// ---- QuantizedConv2d ----

QuantizedConv2d::QuantizedConv2d(std::string name, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                                 bool with_relu, double scale, int64_t zero_point)
    : QuantizedModule(std::move(name), scale, zero_point), params(p), relu(with_relu) {
  check_weight(w, 4, where());
  weight = register_buffer("weight", w);
  if (b.defined()) bias = register_buffer("bias", b.to(DType::Float32));
  repack();
  keep_loaded_weight_params(*this);
}

void QuantizedConv2d::repack() { packed_ = ops::pack_quantized_weight(weight); }

namespace {

// The inputs the convs run by an add handed on, per thread, until the add
// takes them (Note [A conv run by the add it feeds]).
thread_local std::vector<std::pair<const QuantizedConv2d*, Tensor>> handed_on;

}  // namespace

Tensor QuantizedConv2d::forward(const Tensor& x) {
  check_quantized_input(x);
  if (!runs_in.empty()) {
    auto kept = std::find_if(handed_on.begin(), handed_on.end(), [&](const auto& e) { return e.first == this; });
    if (kept != handed_on.end()) kept->second = x;
    else handed_on.emplace_back(this, x);
    return x;
  }
  try {
    return ops::quantized_conv2d(x, *packed_, bias, params, scale(), zero_point(), relu);
  } catch (const Error& e) {
    KILN_FAIL(where(), ": ", e.what());
  }
}

bool QuantizedConv2d::take_handed_on(const Tensor& t) {
  auto kept = std::find_if(handed_on.begin(), handed_on.end(),
                           [&](const auto& e) { return e.first == this && e.second.is_same(t); });
  if (kept == handed_on.end()) return false;
  handed_on.erase(kept);
  return true;
}

Tensor QuantizedConv2d::forward_add(const Tensor& x, const Tensor& residual, double add_scale, int64_t add_zero_point,
                                    bool add_relu) {
  try {
    return ops::quantized_conv2d_add(x, *packed_, bias, params, QuantizedConvGrid{scale(), zero_point(), relu},
                                     residual, add_scale, add_zero_point, add_relu);
  } catch (const Error& e) {
    KILN_FAIL(where(), " (run by ", runs_in, "): ", e.what());
  }
}

std::string QuantizedConv2d::extra_repr() const {
  std::ostringstream os;
  os << conv_repr(weight, params) << (relu ? ", relu=True" : "") << ", scale=" << scale()
     << ", zero_point=" << zero_point();
  if (!runs_in.empty()) os << ", runs_in=" << runs_in;
  return os.str();
}

// ---- QuantizedLinear ----

QuantizedLinear::QuantizedLinear(std::string name, const Tensor& w, const Tensor& b, bool with_relu, double scale,
                                 int64_t zero_point)
    : QuantizedModule(std::move(name), scale, zero_point), relu(with_relu) {
  check_weight(w, 2, where());
  weight = register_buffer("weight", w);
  if (b.defined()) bias = register_buffer("bias", b.to(DType::Float32));
  repack();
  keep_loaded_weight_params(*this);
}

void QuantizedLinear::repack() { packed_ = ops::pack_quantized_weight(weight); }

Tensor QuantizedLinear::forward(const Tensor& x) {
  check_quantized_input(x);
  try {
    return ops::quantized_linear(x, *packed_, bias, scale(), zero_point(), relu);
  } catch (const Error& e) {
    KILN_FAIL(where(), ": ", e.what());
  }
}

std::string QuantizedLinear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << weight.size(1) << ", out_features=" << weight.size(0) << (relu ? ", relu=True" : "")
     << ", scale=" << scale() << ", zero_point=" << zero_point();
  return os.str();
}

// ---- QuantizedAdd ----

QuantizedAdd::QuantizedAdd(std::string name, double scale, int64_t zero_point, bool with_relu)
    : QuantizedModule(std::move(name), scale, zero_point), relu(with_relu) {}

nn::TensorList QuantizedAdd::forward_many(const nn::TensorList& inputs) {
  KILN_CHECK(inputs.size() == 2, where(), ": takes two tensors, got ", inputs.size());
  check_quantized_input(inputs[0], "first input");
  check_quantized_input(inputs[1], "second input");
  if (conv) {
    const int through = conv->take_handed_on(inputs[0]) ? 0 : conv->take_handed_on(inputs[1]) ? 1 : -1;
    KILN_CHECK(through >= 0, where(), ": runs ", conv->where(), " (fuse_conv_add), but neither input is the one that "
               "conv handed on; the forward must feed the conv's output to this add, with only pass-through layers "
               "(Identity) between them");
    return {conv->forward_add(inputs[through], inputs[1 - through], scale(), zero_point(), relu)};
  }
  try {
    return {ops::quantized_add(inputs[0], inputs[1], scale(), zero_point(), relu)};
  } catch (const Error& e) {
    KILN_FAIL(where(), ": ", e.what());
  }
}

std::string QuantizedAdd::extra_repr() const {
  std::ostringstream os;
  if (conv) os << "conv=" << conv->qualified_name << ", ";
  os << (relu ? "relu=True, " : "") << "scale=" << scale() << ", zero_point=" << zero_point();
  return os.str();
}

// ---- FloatLayer ----

FloatLayer::FloatLayer(std::string name, std::shared_ptr<nn::Module> float_layer, double scale, int64_t zero_point)
    : QuantizedModule(std::move(name), scale, zero_point) {
  layer = register_module("layer", std::move(float_layer));
}

Tensor FloatLayer::forward(const Tensor& x) {
  check_quantized_input(x);
  Tensor y = (*layer)(ops::dequantize(x));
  return ops::quantize_per_tensor(y, scale(), zero_point(), DType::UInt8);
}

// ---- dynamic ----

DynamicQuantizedLinear::DynamicQuantizedLinear(std::string name, const Tensor& w, const Tensor& b, bool with_relu,
                                               bool reduce)
    : qualified_name(std::move(name)), relu(with_relu), reduce_range(reduce) {
  check_weight(w, 2, qualified_name + " (DynamicQuantizedLinear)");
  weight = register_buffer("weight", w);
  if (b.defined()) bias = register_buffer("bias", b.to(DType::Float32));
  repack();
  keep_loaded_weight_params(*this);
}

void DynamicQuantizedLinear::repack() { packed_ = ops::pack_quantized_weight(weight); }

Tensor DynamicQuantizedLinear::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.is_floating_point() && !x.is_quantized(), qualified_name,
             " (DynamicQuantizedLinear): expected a float input, got ",
             x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  Tensor y = ops::quantized_linear_dynamic(x, *packed_, bias, reduce_range);
  return relu ? kiln::relu(y) : y;
}

std::string DynamicQuantizedLinear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << weight.size(1) << ", out_features=" << weight.size(0) << (relu ? ", relu=True" : "")
     << ", dtype=qint8";
  return os.str();
}

DynamicQuantizedConv2d::DynamicQuantizedConv2d(std::string name, const Tensor& w, const Tensor& b,
                                               const Conv2dParams& p, bool with_relu, bool reduce)
    : qualified_name(std::move(name)), params(p), relu(with_relu), reduce_range(reduce) {
  check_weight(w, 4, qualified_name + " (DynamicQuantizedConv2d)");
  weight = register_buffer("weight", w);
  if (b.defined()) bias = register_buffer("bias", b.to(DType::Float32));
  repack();
  keep_loaded_weight_params(*this);
}

void DynamicQuantizedConv2d::repack() { packed_ = ops::pack_quantized_weight(weight); }

Tensor DynamicQuantizedConv2d::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.is_floating_point() && !x.is_quantized(), qualified_name,
             " (DynamicQuantizedConv2d): expected a float input, got ",
             x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  Tensor y = ops::quantized_conv2d_dynamic(x, *packed_, bias, params, reduce_range);
  return relu ? kiln::relu(y) : y;
}

std::string DynamicQuantizedConv2d::extra_repr() const {
  return conv_repr(weight, params) + (relu ? ", relu=True" : "") + ", dtype=qint8";
}

}  // namespace kiln::quant
