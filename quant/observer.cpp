#include "quant/observer.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "nn/repr.h"
#include "tensor/factory.h"
#include "quant/state_tensors.h"
#include "tensor/quant_math.h"
#include "tensor/tensor_dict.h"

namespace kiln::quant {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The quantization range torch's calculate_qmin_qmax gives, after checking a
// custom one.
quant_math::QRange checked_range(std::string_view name, const ObserverOptions& o) {
  KILN_CHECK(o.dtype == DType::UInt8 || o.dtype == DType::Int8, name, ": dtype must be uint8 (quint8) or int8 (qint8), got ",
             o.dtype);
  KILN_CHECK(o.quant_min.has_value() == o.quant_max.has_value(), name,
             ": quant_min and quant_max must be given together (got only ",
             o.quant_min ? "quant_min" : "quant_max", ")");
  KILN_CHECK(o.eps > 0 && std::isfinite(o.eps), name, ": eps must be positive and finite, got ", o.eps);
  KILN_CHECK(!(is_symmetric(o.qscheme) && o.reduce_range && o.dtype == DType::UInt8), name,
             ": reduce_range is not supported with symmetric quantization to quint8 (as torch)");
  if (!o.quant_min) return quant_math::qrange(o.dtype, o.reduce_range);
  const int64_t lo = *o.quant_min, hi = *o.quant_max;
  const quant_math::QRange full = quant_math::qrange(o.dtype);
  KILN_CHECK(lo <= 0 && 0 <= hi, name, ": the quantization range [", lo, ", ", hi, "] must include 0");
  KILN_CHECK(lo < hi, name, ": quant_min (", lo, ") must be less than quant_max (", hi, ")");
  KILN_CHECK(lo >= full.lo && hi <= full.hi, name, ": the quantization range [", lo, ", ", hi, "] does not fit ",
             o.dtype, " ([", full.lo, ", ", full.hi, "])");
  if (!o.reduce_range) return {static_cast<int32_t>(lo), static_cast<int32_t>(hi)};
  // Python's // rounds down; so does this for the negative lo.
  auto floor_half = [](int64_t v) { return static_cast<int32_t>(v >= 0 ? v / 2 : -((-v + 1) / 2)); };
  return {floor_half(lo), floor_half(hi)};
}

using detail::host_floats;
using detail::store_floats;

float value_of(const Tensor& t) { return detail::scalar_of(t); }
void set_value(Tensor& t, float v) { detail::fill(t, v); }

// min and max of n contiguous floats (the caller has checked them finite).
std::pair<float, float> min_max(const float* x, int64_t n) {
  float lo = kInf, hi = -kInf;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  return {lo, hi};
}


}  // namespace

std::string_view qscheme_name(QScheme qscheme) {
  switch (qscheme) {
    case QScheme::PerTensorAffine: return "torch.per_tensor_affine";
    case QScheme::PerTensorSymmetric: return "torch.per_tensor_symmetric";
    case QScheme::PerChannelAffine: return "torch.per_channel_affine";
    case QScheme::PerChannelSymmetric: return "torch.per_channel_symmetric";
  }
  KILN_FAIL("qscheme_name: invalid qscheme code ", static_cast<int>(qscheme));
}

std::shared_ptr<const QuantParams> QParams::quant_params() const {
  auto p = std::make_shared<QuantParams>();
  p->scheme = per_channel ? QuantParams::Scheme::PerChannel : QuantParams::Scheme::PerTensor;
  p->scales = scales;
  p->zero_points = zero_points;
  p->axis = axis;
  return p;
}

// ---- Observer -------------------------------------------------------------

Observer::Observer(std::string_view name, ObserverOptions options)
    : nn::Module(std::string(name)), options_(options) {
  quant_math::QRange r = checked_range(name, options_);
  quant_min_ = r.lo;
  quant_max_ = r.hi;
  eps = register_buffer("eps", full({1}, static_cast<float>(options_.eps), DType::Float32));
}

Tensor Observer::forward(const Tensor& x) {
  observe(x);
  return x;
}

Tensor Observer::checked_float32(const Tensor& x) const {
  KILN_CHECK(x.defined(), name(), ": cannot observe an undefined tensor");
  KILN_CHECK(x.is_floating_point(), name(), ": observes floating tensors, got ", x.dtype(),
             x.is_quantized() ? " (a quantized tensor; observers run before quantization)" : "");
  Tensor f = x.detach().to(DType::Float32, kCPU).contiguous();
  const float* p = f.data<float>();
  const int64_t n = f.numel();
  for (int64_t i = 0; i < n; ++i) {
    // One branch per element, almost never taken; a statistics pass is not
    // the place a model spends its time.
    if (!std::isfinite(p[i])) {
      KILN_FAIL(name(), ": input of shape ", x.shape(), " has a non-finite value (", p[i], ") at flat index ", i,
                "; its statistics would give a meaningless scale");
    }
  }
  return f;
}

QParams Observer::default_qparams() const {
  QParams qp;
  qp.scales = {1.0};
  qp.zero_points = {0};
  qp.dtype = options_.dtype;
  qp.per_channel = false;
  qp.quant_min = quant_min_;
  qp.quant_max = quant_max_;
  return qp;
}

// Note [Observer arithmetic], in float32 as torch's tensors compute it.
QParams Observer::qparams_for(const std::vector<float>& min_vals, const std::vector<float>& max_vals,
                              int64_t axis) const {
  QParams qp = default_qparams();
  qp.per_channel = is_per_channel(options_.qscheme);
  qp.axis = qp.per_channel ? axis : 0;
  qp.scales.clear();
  qp.zero_points.clear();
  const float eps_f = value_of(eps);
  const float qmin = static_cast<float>(quant_min_), qmax = static_cast<float>(quant_max_);
  const float levels = static_cast<float>(quant_max_ - quant_min_);
  for (size_t c = 0; c < min_vals.size(); ++c) {
    KILN_CHECK(min_vals[c] <= max_vals[c], name(), ": min ", min_vals[c], " is greater than max ", max_vals[c],
               c > 0 || qp.per_channel ? " (channel " + std::to_string(c) + ")" : std::string());
    const float min_neg = std::min(min_vals[c], 0.0f);
    const float max_pos = std::max(max_vals[c], 0.0f);
    float scale;
    int64_t zero_point = 0;
    if (is_symmetric(options_.qscheme)) {
      scale = std::max(-min_neg, max_pos) / (levels / 2.0f);
      scale = std::max(scale, eps_f);
      if (options_.dtype == DType::UInt8) {
        // torch: (quant_min + quant_max) // 2 with a custom range, else 128.
        zero_point = options_.quant_min ? (quant_min_ + quant_max_) / 2 : 128;
      }
    } else {
      scale = (max_pos - min_neg) / levels;
      scale = std::max(scale, eps_f);
      const float zp = qmin - std::nearbyint(min_neg / scale);
      zero_point = static_cast<int64_t>(std::min(std::max(zp, qmin), qmax));
    }
    qp.scales.push_back(scale);
    qp.zero_points.push_back(zero_point);
  }
  return qp;
}

std::string Observer::options_repr() const {
  std::ostringstream os;
  os << "dtype=torch." << (options_.dtype == DType::UInt8 ? "quint8" : "qint8")
     << ", qscheme=" << qscheme_name(options_.qscheme) << ", reduce_range=" << nn::repr::boolean(options_.reduce_range)
     << ", quant_min=" << quant_min_ << ", quant_max=" << quant_max_;
  return os.str();
}

// ---- MinMaxObserver -----------------------------------------------------------

MinMaxObserver::MinMaxObserver(ObserverOptions options) : MinMaxObserver("MinMaxObserver", options) {}

MinMaxObserver::MinMaxObserver(std::string_view name, ObserverOptions options) : Observer(name, options) {
  KILN_CHECK(!is_per_channel(options.qscheme), name, ": qscheme ", qscheme_name(options.qscheme),
             " is per-channel; this observer is per-tensor (use PerChannelMinMaxObserver)");
  min_val = register_buffer("min_val", scalar_tensor(kInf, DType::Float32));
  max_val = register_buffer("max_val", scalar_tensor(-kInf, DType::Float32));
}

void MinMaxObserver::observe(const Tensor& x) {
  if (x.numel() == 0) return;
  Tensor f = checked_float32(x);
  auto [lo, hi] = min_max(f.data<float>(), f.numel());
  set_value(min_val, std::min(lo, value_of(min_val)));
  set_value(max_val, std::max(hi, value_of(max_val)));
}

bool MinMaxObserver::has_statistics() const { return !(value_of(min_val) == kInf && value_of(max_val) == -kInf); }

QParams MinMaxObserver::calculate_qparams() const {
  if (!has_statistics()) return default_qparams();
  return qparams_for({value_of(min_val)}, {value_of(max_val)}, 0);
}

void MinMaxObserver::reset_min_max_vals() {
  set_value(min_val, kInf);
  set_value(max_val, -kInf);
}

std::string MinMaxObserver::extra_repr() const {
  return "min_val=" + nn::repr::floating(value_of(min_val)) + ", max_val=" + nn::repr::floating(value_of(max_val)) +
         ", " + options_repr();
}

// ---- MovingAverageMinMaxObserver ------------------------------------------------

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(double averaging_constant, ObserverOptions options)
    : MinMaxObserver("MovingAverageMinMaxObserver", options), averaging_constant(averaging_constant) {
  KILN_CHECK(averaging_constant > 0 && averaging_constant <= 1, "MovingAverageMinMaxObserver: averaging_constant must be in (0, 1], got ",
             averaging_constant);
}

void MovingAverageMinMaxObserver::observe(const Tensor& x) {
  if (x.numel() == 0) return;
  Tensor f = checked_float32(x);
  auto [lo, hi] = min_max(f.data<float>(), f.numel());
  if (!has_statistics()) {
    set_value(min_val, lo);
    set_value(max_val, hi);
    return;
  }
  // torch: min_val + c * (cur - min_val) on float32 tensors, c a Python
  // float, which the tensor op rounds to float32.
  const float c = static_cast<float>(averaging_constant);
  const float mn = value_of(min_val), mx = value_of(max_val);
  set_value(min_val, mn + c * (lo - mn));
  set_value(max_val, mx + c * (hi - mx));
}

std::string MovingAverageMinMaxObserver::extra_repr() const {
  return "averaging_constant=" + nn::repr::floating(averaging_constant) + ", " + MinMaxObserver::extra_repr();
}

// ---- PerChannelMinMaxObserver -----------------------------------------------------

ObserverOptions PerChannelMinMaxObserver::per_channel_defaults() {
  ObserverOptions o;
  o.qscheme = QScheme::PerChannelAffine;
  return o;
}

PerChannelMinMaxObserver::PerChannelMinMaxObserver(int64_t ch_axis, ObserverOptions options)
    : Observer("PerChannelMinMaxObserver", options), ch_axis(ch_axis), axis_(ch_axis) {
  KILN_CHECK(is_per_channel(options.qscheme), "PerChannelMinMaxObserver: qscheme ", qscheme_name(options.qscheme),
             " is per-tensor; this observer needs torch.per_channel_affine or torch.per_channel_symmetric");
  min_val = register_buffer("min_val", empty({0}, DType::Float32));
  max_val = register_buffer("max_val", empty({0}, DType::Float32));
  // A state dict saved after calibration holds (C,) statistics; a fresh
  // observer has (0,) ones, which load_state_dict would refuse as a shape
  // mismatch. Resize them first (torch's _load_from_state_dict does the same).
  register_load_state_dict_pre_hook([](nn::Module& m, TensorDict& state, const std::string& prefix) {
    auto& self = static_cast<PerChannelMinMaxObserver&>(m);
    for (auto [key, buffer] : {std::pair{"min_val", &self.min_val}, std::pair{"max_val", &self.max_val}}) {
      const std::string full_key = prefix + key;
      if (!state.contains(full_key)) continue;
      const Tensor& incoming = state.at(full_key);
      KILN_CHECK(incoming.dim() == 1, "PerChannelMinMaxObserver: state dict entry ", full_key, " has shape ",
                 incoming.shape(), "; expected (channels,)");
      detail::resize_keeping_handle(*buffer, incoming.shape());
    }
  });
}

void PerChannelMinMaxObserver::observe(const Tensor& x) {
  if (x.numel() == 0) return;
  KILN_CHECK(x.dim() >= 1, "PerChannelMinMaxObserver: cannot observe a 0-dim tensor per channel (ch_axis ", ch_axis,
             ")");
  KILN_CHECK(ch_axis >= -x.dim() && ch_axis < x.dim(), "PerChannelMinMaxObserver: ch_axis ", ch_axis,
             " is out of range for an input of shape ", x.shape());
  const int64_t axis = ch_axis < 0 ? ch_axis + x.dim() : ch_axis;
  axis_ = axis;
  const int64_t channels = x.size(axis);
  KILN_CHECK(min_val.numel() == 0 || min_val.numel() == channels, "PerChannelMinMaxObserver: input of shape ",
             x.shape(), " has ", channels, " channels along dim ", axis, ", but the observer has seen ",
             min_val.numel());
  Tensor f = checked_float32(x);
  // f: (outer, channels, inner), contiguous.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.size(d);
  for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= x.size(d);
  std::vector<float> lo(channels, kInf), hi(channels, -kInf);
  const float* p = f.data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      auto [l, h] = min_max(p + (o * channels + c) * inner, inner);
      lo[c] = std::min(lo[c], l);
      hi[c] = std::max(hi[c], h);
    }
  }
  if (min_val.numel() == 0) {
    detail::resize_keeping_handle(min_val, {channels});
    detail::resize_keeping_handle(max_val, {channels});
  } else {
    std::vector<float> old_lo = host_floats(min_val), old_hi = host_floats(max_val);
    for (int64_t c = 0; c < channels; ++c) {
      lo[c] = std::min(lo[c], old_lo[c]);
      hi[c] = std::max(hi[c], old_hi[c]);
    }
  }
  store_floats(min_val, lo);
  store_floats(max_val, hi);
}

bool PerChannelMinMaxObserver::has_statistics() const { return min_val.numel() > 0; }

QParams PerChannelMinMaxObserver::calculate_qparams() const {
  if (!has_statistics()) return default_qparams();
  return qparams_for(host_floats(min_val), host_floats(max_val), axis_);
}

void PerChannelMinMaxObserver::reset_min_max_vals() {
  detail::resize_keeping_handle(min_val, {0});
  detail::resize_keeping_handle(max_val, {0});
}

std::string PerChannelMinMaxObserver::extra_repr() const {
  return "ch_axis=" + std::to_string(ch_axis) + ", channels=" + std::to_string(min_val.numel()) + ", " +
         options_repr();
}

}  // namespace kiln::quant
