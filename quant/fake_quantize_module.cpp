// The FakeQuantize module (quant/fake_quantize.h).
#include <cmath>

#include "autograd/grad_mode.h"
#include "nn/repr.h"
#include "quant/fake_quantize.h"
#include "quant/state_tensors.h"
#include "tensor/factory.h"
#include "tensor/tensor_dict.h"

namespace kiln::quant {

namespace {

bool flag(const Tensor& t) { return t.item<int64_t>() != 0; }

}  // namespace

FakeQuantize::FakeQuantize(std::shared_ptr<Observer> observer, FakeQuantizeOptions options)
    : nn::Module("FakeQuantize"), options(options), activation_post_process(std::move(observer)) {
  KILN_CHECK(activation_post_process != nullptr, "FakeQuantize: the observer is null");
  register_module("activation_post_process", activation_post_process);
  fake_quant_enabled_ = register_buffer("fake_quant_enabled", ones({1}, DType::UInt8));
  observer_enabled_ = register_buffer("observer_enabled", ones({1}, DType::UInt8));
  if (options.learnable) {
    scale = register_parameter("scale", ones({1}, DType::Float32));
    zero_point = register_parameter("zero_point", zeros({1}, DType::Float32));
  } else {
    scale = register_buffer("scale", ones({1}, DType::Float32));
    zero_point = register_buffer("zero_point", zeros({1}, DType::Int32));
  }
  // A per-channel state dict holds (C) scales and zero points where a fresh
  // module has (1): take the saved shape before the copy.
  register_load_state_dict_pre_hook([](nn::Module& m, TensorDict& state, const std::string& prefix) {
    auto& self = static_cast<FakeQuantize&>(m);
    for (auto [key, tensor] : {std::pair{"scale", &self.scale}, std::pair{"zero_point", &self.zero_point}}) {
      const std::string full_key = prefix + key;
      if (!state.contains(full_key)) continue;
      const Tensor& incoming = state.at(full_key);
      KILN_CHECK(incoming.dim() == 1 && incoming.numel() >= 1, "FakeQuantize: state dict entry ", full_key,
                 " has shape ", incoming.shape(), "; expected (1) or (channels)");
      NoGradGuard no_grad;
      detail::resize_keeping_handle(*tensor, incoming.shape());
    }
  });
}

void FakeQuantize::enable_observer(bool enabled) { detail::fill(observer_enabled_, enabled ? 1 : 0); }
bool FakeQuantize::is_observer_enabled() const { return flag(observer_enabled_); }
void FakeQuantize::enable_fake_quant(bool enabled) { detail::fill(fake_quant_enabled_, enabled ? 1 : 0); }
bool FakeQuantize::is_fake_quant_enabled() const { return flag(fake_quant_enabled_); }

QParams FakeQuantize::calculate_qparams() const { return activation_post_process->calculate_qparams(); }

int64_t FakeQuantize::channel_axis(const Tensor& x) const {
  const auto* per_channel = dynamic_cast<const PerChannelMinMaxObserver*>(activation_post_process.get());
  KILN_CHECK(per_channel != nullptr, "FakeQuantize: the observer (", activation_post_process->name(),
             ") has a per-channel qscheme but is not a PerChannelMinMaxObserver");
  const int64_t axis = per_channel->ch_axis;
  KILN_CHECK(x.dim() >= 1 && axis >= -x.dim() && axis < x.dim(), "FakeQuantize: ch_axis ", axis,
             " is out of range for an input of shape ", x.shape());
  return axis < 0 ? axis + x.dim() : axis;
}

void FakeQuantize::set_qparams(const QParams& qp) {
  NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(qp.scales.size());
  detail::resize_keeping_handle(scale, {n});
  detail::resize_keeping_handle(zero_point, {n});
  std::vector<float> scales(qp.scales.begin(), qp.scales.end());
  std::vector<float> zero_points(qp.zero_points.begin(), qp.zero_points.end());  // small integers: exact
  detail::store_floats(scale, scales);
  detail::store_floats(zero_point, zero_points);
}

QParams FakeQuantize::qparams() const {
  const Observer& obs = *activation_post_process;
  QParams qp;
  qp.dtype = obs.dtype();
  qp.quant_min = obs.quant_min();
  qp.quant_max = obs.quant_max();
  qp.per_channel = is_per_channel(obs.qscheme());
  if (qp.per_channel) {
    const auto* per_channel = dynamic_cast<const PerChannelMinMaxObserver*>(&obs);
    qp.axis = per_channel != nullptr ? per_channel->axis() : 0;
  }
  const auto lo = static_cast<float>(qp.quant_min), hi = static_cast<float>(qp.quant_max);
  for (float s : detail::host_floats(scale)) qp.scales.push_back(s);
  // A learnable zero point is rounded as the forward rounds it; a buffer's is an integer.
  for (float z : detail::host_floats(zero_point)) {
    qp.zero_points.push_back(static_cast<int64_t>(std::fmin(std::fmax(std::nearbyint(z), lo), hi)));
  }
  return qp;
}

Tensor FakeQuantize::forward(const Tensor& x) {
  Observer& obs = *activation_post_process;
  const bool per_channel = is_per_channel(obs.qscheme());
  if (is_observer_enabled()) {
    obs(x.detach());
    set_qparams(obs.calculate_qparams());
  } else if (options.learnable) {
    // LSQ may step the scale to or below zero; keep it a valid scale (torch
    // clamps it to eps the same way).
    NoGradGuard no_grad;
    const float eps = detail::scalar_of(obs.eps);
    std::vector<float> scales = detail::host_floats(scale);
    for (float& s : scales) s = std::fmax(s, eps);
    detail::store_floats(scale, scales);
  }
  if (!is_fake_quant_enabled()) return x;

  if (options.learnable) {
    if (is_symmetric(obs.qscheme())) {
      NoGradGuard no_grad;
      detail::fill(zero_point, 0.0);
    }
    const double grad_factor =
        options.use_grad_scaling ? 1.0 / std::sqrt(static_cast<double>(x.numel()) * static_cast<double>(obs.quant_max()))
                                 : 1.0;
    if (per_channel) {
      return fake_quantize_learnable_per_channel(x, scale, zero_point, channel_axis(x), obs.quant_min(),
                                                 obs.quant_max(), grad_factor);
    }
    return fake_quantize_learnable(x, scale, zero_point, obs.quant_min(), obs.quant_max(), grad_factor);
  }
  QParams qp = qparams();
  if (per_channel) {
    qp.axis = channel_axis(x);
    KILN_CHECK(static_cast<int64_t>(qp.scales.size()) == x.size(qp.axis),
               "FakeQuantize: holds ", qp.scales.size(), " channel scales but the input of shape ", x.shape(), " has ",
               x.size(qp.axis), " channels along dim ", qp.axis, " (run the observer on it first)");
  }
  // A per-tensor result carries its grid (fake_quantize sets QuantParams).
  return fake_quantize(x, qp);
}

std::string FakeQuantize::extra_repr() const {
  return "fake_quant_enabled=" + nn::repr::boolean(is_fake_quant_enabled()) +
         ", observer_enabled=" + nn::repr::boolean(is_observer_enabled()) +
         ", quant_min=" + std::to_string(activation_post_process->quant_min()) +
         ", quant_max=" + std::to_string(activation_post_process->quant_max()) +
         ", qscheme=" + std::string(qscheme_name(activation_post_process->qscheme())) +
         (options.learnable ? ", learnable=True" : "");
}

}  // namespace kiln::quant
