// The FakeQuantize module (quant/fake_quantize.h).
#include <cmath>

#include "autograd/grad_mode.h"
#include "nn/repr.h"
#include "quant/fake_quantize.h"
#include "tensor/factory.h"
#include "tensor/tensor_dict.h"

namespace kiln::quant {

namespace {

bool flag(const Tensor& t) { return *t.data<uint8_t>() != 0; }

// Points `t` (keeping its handle, so optimizers holding a learnable scale
// keep it) at a fresh tensor of `shape`, when its shape differs.
void resize(Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return;
  t.impl()->set_storage(zeros(shape, t.dtype()), shape);
}

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
      resize(*tensor, incoming.shape());
    }
  });
}

void FakeQuantize::enable_observer(bool enabled) { *observer_enabled_.data<uint8_t>() = enabled ? 1 : 0; }
bool FakeQuantize::is_observer_enabled() const { return flag(observer_enabled_); }
void FakeQuantize::enable_fake_quant(bool enabled) { *fake_quant_enabled_.data<uint8_t>() = enabled ? 1 : 0; }
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
  resize(scale, {n});
  resize(zero_point, {n});
  for (int64_t c = 0; c < n; ++c) {
    scale.data<float>()[c] = static_cast<float>(qp.scales[c]);
    if (options.learnable) {
      zero_point.data<float>()[c] = static_cast<float>(qp.zero_points[c]);
    } else {
      zero_point.data<int32_t>()[c] = static_cast<int32_t>(qp.zero_points[c]);
    }
  }
  scale.impl()->bump_version();
  zero_point.impl()->bump_version();
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
  for (int64_t c = 0; c < scale.numel(); ++c) {
    qp.scales.push_back(scale.data<float>()[c]);
    qp.zero_points.push_back(options.learnable
                                 ? static_cast<int64_t>(std::fmin(std::fmax(std::nearbyint(zero_point.data<float>()[c]), lo), hi))
                                 : zero_point.data<int32_t>()[c]);
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
    const float eps = *obs.eps.data<float>();
    for (int64_t c = 0; c < scale.numel(); ++c) scale.data<float>()[c] = std::fmax(scale.data<float>()[c], eps);
  }
  if (!is_fake_quant_enabled()) return x;

  if (options.learnable) {
    if (is_symmetric(obs.qscheme())) {
      NoGradGuard no_grad;
      for (int64_t c = 0; c < zero_point.numel(); ++c) zero_point.data<float>()[c] = 0.0f;
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
