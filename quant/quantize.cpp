#include "quant/quantize.h"

#include <set>

#include "autograd/grad_mode.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/flatten.h"
#include "nn/functional_modules.h"
#include "nn/linear.h"
#include "nn/pooling.h"
#include "quant/fake_quant_modules.h"
#include "quant/fake_quantize.h"
#include "quant/fuse.h"
#include "quant/quantized_modules.h"
#include "quant/stubs.h"
#include "tensor/quantize.h"

namespace kiln::quant {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

template <class T>
bool is(const std::shared_ptr<nn::Module>& m) {
  return std::dynamic_pointer_cast<T>(m) != nullptr;
}

bool is_conv(const std::shared_ptr<nn::Module>& m) { return is<nn::Conv2d>(m) || is<ConvBnReLU2d>(m); }
bool is_linear(const std::shared_ptr<nn::Module>& m) { return is<nn::Linear>(m) || is<LinearReLU>(m); }

// Layers that map values on a grid onto the same grid: they stay as they are.
bool keeps_grid(const std::shared_ptr<nn::Module>& m) {
  return is<nn::ReLU>(m) || is<nn::MaxPool2d>(m) || is<nn::Flatten>(m) || is<nn::Identity>(m) ||
         is<nn::Dropout>(m) || is<DeQuantStub>(m);
}

struct PrepareWalk {
  const QConfigMapping& mapping;
  bool qat;
  std::set<std::string> matched;  // names of the mapping that met a module

  void children(nn::Module& parent, const std::string& prefix) {
    for (const auto& [name, child] : parent.named_children()) {
      std::string path = join(prefix, name);
      for (const auto& set : mapping.names()) {
        if (set == path) matched.insert(set);
      }
      std::shared_ptr<nn::Module> replacement = prepared(path, child);
      if (replacement) {
        replacement->train(child->is_training());
        parent.replace_module(name, replacement);
      } else {
        children(*child, path);
      }
    }
  }

  template <class M>
  std::shared_ptr<nn::Module> with_mode(std::shared_ptr<M> m) {
    m->observer_enabled = true;
    m->fake_quant_enabled = qat;
    return m;
  }

  std::shared_ptr<nn::Module> prepared(const std::string& path, const std::shared_ptr<nn::Module>& child) {
    const std::optional<QConfig>& qconfig = mapping.for_module(path);
    if (!qconfig) {
      // Left in float32. Set by name inside a quantized model, the layer is
      // an island: int8 in, float32 inside, int8 out.
      bool island = mapping.for_module("").has_value() && (is_conv(child) || is_linear(child));
      if (island) return with_mode(std::make_shared<FakeQuantFloatLayer>(path, child, *mapping.for_module("")));
      return nullptr;
    }
    if (is<QuantStub>(child)) {
      auto fq = std::make_shared<FakeQuantize>(qconfig->activation());
      fq->enable_fake_quant(qat);
      return fq;
    }
    if (is_conv(child)) return with_mode(std::make_shared<FakeQuantConv2d>(path, *child, *qconfig));
    if (is_linear(child)) return with_mode(std::make_shared<FakeQuantLinear>(path, *child, *qconfig));
    if (is<nn::Add>(child)) return with_mode(std::make_shared<FakeQuantAdd>(path, *qconfig));
    if (is<AddReLU>(child)) return with_mode(std::make_shared<FakeQuantAdd>(path, *qconfig, /*relu=*/true));
    if (is<nn::AvgPool2d>(child) || is<nn::AdaptiveAvgPool2d>(child)) {
      return with_mode(std::make_shared<FakeQuantAvgPool2d>(path, child));
    }
    if (keeps_grid(child) || !child->named_children().empty()) return nullptr;  // kept, or a container
    KILN_FAIL(qat ? "prepare_qat" : "prepare", ": ", path, " (", child->name(),
              ") cannot be quantized: the int8 layers are Conv2d, Linear, the fused Conv2d+BatchNorm2d(+ReLU), "
              "Conv2d+ReLU, Linear+ReLU and Add+ReLU, nn::Add and average pooling (ReLU, MaxPool2d, Flatten, Identity and "
              "Dropout pass through). Fuse a BatchNorm2d into the conv before it (fuse_modules), or leave the layer "
              "in float32 with QConfigMapping::set_module_name(\"", path, "\", std::nullopt)");
  }
};

void prepare_model(nn::Module& model, const QConfigMapping& mapping, bool qat) {
  const char* op = qat ? "prepare_qat" : "prepare";
  for (const auto& [name, module] : model.named_modules("", false)) {
    KILN_CHECK(!is<FakeQuantModule>(module) && !is<QuantizedModule>(module) && !is<FakeQuantize>(module), op, ": ",
               name, " (", module->name(), ") is already ", is<QuantizedModule>(module) ? "converted" : "prepared");
  }
  PrepareWalk walk{mapping, qat, {}};
  walk.children(model, "");
  for (const auto& name : mapping.names()) {
    KILN_CHECK(walk.matched.count(name), op, ": the qconfig mapping names '", name, "', which is not a module of ",
               model.name());
  }
}

void convert_children(nn::Module& parent, const std::string& prefix) {
  for (const auto& [name, child] : parent.named_children()) {
    std::string path = join(prefix, name);
    std::shared_ptr<nn::Module> out;
    if (auto fq = std::dynamic_pointer_cast<FakeQuantize>(child)) {
      KILN_CHECK(fq->has_statistics(), path,
                 " (QuantStub): its observer has recorded nothing, so there is no scale to quantize with; run "
                 "calibration data through the prepared model before convert()");
      QParams q = fq->qparams();  // the grid its forward used
      out = std::make_shared<Quantize>(path, q.scales[0], q.zero_points[0], q.quant_min, q.quant_max);
    } else if (is<DeQuantStub>(child)) {
      out = std::make_shared<DeQuantize>(path);
    } else if (auto conv = std::dynamic_pointer_cast<FakeQuantConv2d>(child)) {
      NoGradGuard no_grad;
      auto [w, b] = conv->folded_weight_bias();
      QParams gw = conv->weight_grid(w, /*observe=*/false);
      QParams gy = observer_qparams(*conv->output_observer(), path + " (" + conv->name() + ")");
      out = std::make_shared<QuantizedConv2d>(path, ops::quantize(w.detach(), gw.quant_params(), DType::Int8),
                                              b.defined() ? b.detach() : Tensor(), conv->params, conv->relu,
                                              gy.scales[0], gy.zero_points[0]);
    } else if (auto linear = std::dynamic_pointer_cast<FakeQuantLinear>(child)) {
      NoGradGuard no_grad;
      QParams gw = linear->weight_grid(/*observe=*/false);
      QParams gy = observer_qparams(*linear->output_observer(), path + " (" + linear->name() + ")");
      out = std::make_shared<QuantizedLinear>(
          path, ops::quantize(linear->weight.detach(), gw.quant_params(), DType::Int8),
          linear->bias.defined() ? linear->bias.detach() : Tensor(), linear->relu, gy.scales[0], gy.zero_points[0]);
    } else if (auto add = std::dynamic_pointer_cast<FakeQuantAdd>(child)) {
      QParams gy = observer_qparams(*add->output_observer(), path + " (" + add->name() + ")");
      out = std::make_shared<QuantizedAdd>(path, gy.scales[0], gy.zero_points[0], add->relu);
    } else if (auto pool = std::dynamic_pointer_cast<FakeQuantAvgPool2d>(child)) {
      out = pool->pool;
    } else if (auto island = std::dynamic_pointer_cast<FakeQuantFloatLayer>(child)) {
      QParams gy = observer_qparams(*island->output_observer(), path + " (" + island->layer->name() + ", float32)");
      out = std::make_shared<FloatLayer>(path, island->layer, gy.scales[0], gy.zero_points[0]);
    }
    if (out) {
      out->train(child->is_training());
      parent.replace_module(name, out);
    } else {
      convert_children(*child, path);
    }
  }
}

void dynamic_children(nn::Module& parent, const std::string& prefix, const DynamicOptions& options) {
  for (const auto& [name, child] : parent.named_children()) {
    std::string path = join(prefix, name);
    const std::optional<QConfig>& qconfig = options.mapping.for_module(path);
    auto quantized_weight = [&](const Tensor& w) {
      auto observer = qconfig->weight();
      (*observer)(w.detach());
      return ops::quantize(w.detach(), observer_qparams(*observer, path).quant_params(), DType::Int8);
    };
    std::shared_ptr<nn::Module> out;
    if (qconfig && options.linear && is_linear(child)) {
      NoGradGuard no_grad;
      auto fused = std::dynamic_pointer_cast<LinearReLU>(child);
      const nn::Linear& l = fused ? *fused->linear : *std::dynamic_pointer_cast<nn::Linear>(child);
      out = std::make_shared<DynamicQuantizedLinear>(path, quantized_weight(l.weight), l.bias, fused != nullptr,
                                                     options.reduce_range);
    } else if (qconfig && options.conv && is_conv(child)) {
      NoGradGuard no_grad;
      auto fused = std::dynamic_pointer_cast<ConvBnReLU2d>(child);
      KILN_CHECK(!fused || !fused->bn, "quantize_dynamic: ", path,
                 " still has its BatchNorm2d; fuse it in eval mode (fuse_modules) first");
      const nn::Conv2d& c = fused ? *fused->conv : *std::dynamic_pointer_cast<nn::Conv2d>(child);
      check_padded_by_params("quantize_dynamic", path, c);
      out = std::make_shared<DynamicQuantizedConv2d>(path, quantized_weight(c.weight), c.bias, c.params,
                                                     fused != nullptr && fused->relu, options.reduce_range);
    }
    if (out) {
      out->train(child->is_training());
      parent.replace_module(name, out);
    } else {
      dynamic_children(*child, path, options);
    }
  }
}

}  // namespace

void prepare(nn::Module& model, const QConfigMapping& mapping) { prepare_model(model, mapping, false); }

void prepare_qat(nn::Module& model, const QConfigMapping& mapping) { prepare_model(model, mapping, true); }

void convert(nn::Module& model) { convert_children(model, ""); }

void fuse_conv_add(nn::Module& model, const std::vector<std::pair<std::string, std::string>>& pairs) {
  for (const auto& [conv_name, add_name] : pairs) {
    const std::string pair = "{" + conv_name + ", " + add_name + "}";
    auto conv = std::dynamic_pointer_cast<QuantizedConv2d>(model.get_submodule(conv_name));
    auto add = std::dynamic_pointer_cast<QuantizedAdd>(model.get_submodule(add_name));
    KILN_CHECK(conv && add, "fuse_conv_add: in ", pair, ", ", conv ? add_name : conv_name, " is a ",
               (conv ? model.get_submodule(add_name) : model.get_submodule(conv_name))->name(), ", not a ",
               conv ? "QuantizedAdd" : "QuantizedConv2d", "; fuse after convert()");
    KILN_CHECK(conv->runs_in.empty() && !add->conv, "fuse_conv_add: in ", pair, ", ",
               conv->runs_in.empty() ? add_name + " already runs " + add->conv->qualified_name
                                     : conv_name + " already runs in " + conv->runs_in);
    conv->runs_in = add->qualified_name;
    add->conv = conv;
  }
}

void quantize_dynamic(nn::Module& model, const DynamicOptions& options) { dynamic_children(model, "", options); }

void enable_observer(nn::Module& model, bool on) {
  for (const auto& m : model.modules()) {
    if (auto p = std::dynamic_pointer_cast<FakeQuantModule>(m)) p->observer_enabled = on;
    if (auto fq = std::dynamic_pointer_cast<FakeQuantize>(m)) fq->enable_observer(on);
  }
}

void enable_fake_quant(nn::Module& model, bool on) {
  for (const auto& m : model.modules()) {
    if (auto p = std::dynamic_pointer_cast<FakeQuantModule>(m)) p->fake_quant_enabled = on;
    if (auto fq = std::dynamic_pointer_cast<FakeQuantize>(m)) fq->enable_fake_quant(on);
  }
}

void freeze_bn_stats(nn::Module& model) {
  for (const auto& m : model.modules()) {
    if (auto conv = std::dynamic_pointer_cast<FakeQuantConv2d>(m)) conv->bn_frozen = true;
  }
}

int64_t model_size_bytes(const nn::Module& model) {
  int64_t total = 0;
  for (const auto& [name, t] : model.state_dict()) total += static_cast<int64_t>(t.nbytes());
  return total;
}

std::vector<std::string> quantizable_layers(nn::Module& model) {
  std::vector<std::string> out;
  for (const auto& [name, m] : model.named_modules("", false)) {
    if (is_conv(m) || is_linear(m)) out.push_back(name);
  }
  return out;
}

std::vector<SensitivityRow> sensitivity(const std::function<std::shared_ptr<nn::Module>()>& make_model,
                                        const std::function<void(nn::Module&)>& calibrate,
                                        const std::function<double(nn::Module&)>& evaluate, const QConfig& qconfig) {
  std::vector<SensitivityRow> rows;
  std::vector<std::string> layers = quantizable_layers(*make_model());
  for (const auto& layer : layers) {
    std::shared_ptr<nn::Module> model = make_model();
    model->eval();
    // The layer alone between its own stubs: quantized in, quantized out.
    auto wrapped = std::make_shared<QuantWrapper>(model->get_submodule(layer));
    size_t dot = layer.rfind('.');
    nn::Module& parent = dot == std::string::npos ? *model : *model->get_submodule(layer.substr(0, dot));
    parent.replace_module(dot == std::string::npos ? layer : layer.substr(dot + 1), wrapped);
    QConfigMapping mapping(std::nullopt);
    mapping.set_module_name(layer, qconfig);
    prepare(*model, mapping);
    calibrate(*model);
    convert(*model);
    rows.push_back({layer, evaluate(*model)});
  }
  return rows;
}

}  // namespace kiln::quant
