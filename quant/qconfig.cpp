#include "quant/qconfig.h"

#include "tensor/quant_math.h"

namespace kiln::quant {

namespace {

ObserverOptions weight_options() {
  ObserverOptions o;
  o.dtype = DType::Int8;
  o.qscheme = QScheme::PerChannelSymmetric;
  return o;
}

ObserverFactory per_channel_weight() {
  return [] { return std::make_shared<PerChannelMinMaxObserver>(0, weight_options()); };
}

}  // namespace

QConfig default_qconfig(bool reduce_range) {
  ObserverOptions activation;
  activation.reduce_range = reduce_range;
  return {.activation = [activation] { return std::make_shared<HistogramObserver>(activation); },
          .weight = per_channel_weight()};
}

QConfig default_qat_qconfig(bool reduce_range) {
  ObserverOptions activation;
  activation.reduce_range = reduce_range;
  return {.activation = [activation] { return std::make_shared<MovingAverageMinMaxObserver>(0.01, activation); },
          .weight = per_channel_weight()};
}

QConfig default_dynamic_qconfig() {
  return {.activation = [] { return std::make_shared<MinMaxObserver>(); }, .weight = per_channel_weight()};
}

QConfigMapping& QConfigMapping::set_global(std::optional<QConfig> qconfig) {
  global_ = std::move(qconfig);
  return *this;
}

QConfigMapping& QConfigMapping::set_module_name(const std::string& name, std::optional<QConfig> qconfig) {
  KILN_CHECK(!name.empty(), "QConfigMapping::set_module_name: the name is empty (use set_global)");
  by_name_[name] = std::move(qconfig);
  return *this;
}

const std::optional<QConfig>& QConfigMapping::for_module(const std::string& name) const {
  // The longest set prefix that ends at a dot or the end: "layer1" covers
  // "layer1.0.conv1", not "layer10".
  std::string prefix = name;
  while (true) {
    auto it = by_name_.find(prefix);
    if (it != by_name_.end()) return it->second;
    size_t dot = prefix.rfind('.');
    if (dot == std::string::npos) return global_;
    prefix.resize(dot);
  }
}

std::vector<std::string> QConfigMapping::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : by_name_) out.push_back(name);
  return out;
}

QParams observer_qparams(const Observer& observer, const std::string& where) {
  KILN_CHECK(observer.has_statistics(), where,
             ": its observer has recorded nothing, so there is no scale to quantize with; run calibration data "
             "through the prepared model before convert()");
  return observer.calculate_qparams();
}

std::optional<QParams> grid_of(const Tensor& t) {
  const auto& p = t.impl()->quant_params();
  if (p == nullptr || p->scheme != QuantParams::Scheme::PerTensor) return std::nullopt;
  QParams q;
  q.scales = p->scales;
  q.zero_points = p->zero_points;
  q.dtype = t.is_quantized() ? t.dtype() : DType::UInt8;
  auto range = quant_math::qrange(q.dtype);
  q.quant_min = range.lo;
  q.quant_max = range.hi;
  return q;
}

Tensor with_grid(Tensor t, const QParams& grid) {
  t.impl()->set_quant_params(grid.quant_params());
  return t;
}

}  // namespace kiln::quant
