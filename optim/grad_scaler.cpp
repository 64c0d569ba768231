// GradScaler: loss scaling, the inf/NaN check, skipped steps and the
// scale's update (Note [Dynamic loss scaling] in optim/grad_scaler.h).
#include "optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/factory.h"
#include "tensor/fused_optim.h"

namespace kiln::optim {

namespace {

void check_options(const GradScalerOptions& o, std::string_view op) {
  KILN_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), op, ": init_scale must be positive and finite, got ",
             o.init_scale);
  KILN_CHECK(o.growth_factor > 1, op, ": growth_factor must be > 1, got ", o.growth_factor);
  KILN_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, op, ": backoff_factor must be in (0, 1), got ",
             o.backoff_factor);
  KILN_CHECK(o.growth_interval >= 1, op, ": growth_interval must be at least 1, got ", o.growth_interval);
}

// The 0-dim entry `key` of a state dict, or an error naming it.
const Tensor& entry(const TensorDict& dict, const std::string& key) {
  KILN_CHECK(dict.contains(key), "GradScaler::load_state_dict: missing key '", key, "'");
  const Tensor& t = dict.at(key);
  KILN_CHECK(t.numel() == 1, "GradScaler::load_state_dict: '", key, "' must hold one number, got shape ", t.shape());
  return t;
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  check_options(options_, "GradScaler");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  KILN_CHECK(loss.defined() && loss.is_floating_point(), "GradScaler::scale: expected a floating loss, got ",
             loss.defined() ? std::string(dtype_name(loss.dtype())) : std::string("an undefined tensor"));
  // float16 tops out at 65504: the product must be formed in float32, as
  // torch's float32 scale tensor promotes it.
  const bool half = loss.dtype() == DType::Float16 || loss.dtype() == DType::BFloat16;
  return kiln::mul(half ? loss.to(DType::Float32) : loss, static_cast<double>(scale_));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerRecord& record = records_[&optimizer];
  KILN_CHECK(record.stage != Stage::Unscaled,
             "GradScaler::unscale_: already called on this optimizer since the last update()");
  KILN_CHECK(record.stage != Stage::Stepped,
             "GradScaler::unscale_: called after step(); unscale_ must come between backward and step");

  // As torch: the reciprocal in double, rounded once to float32, so that a
  // power-of-two scale unscales exactly.
  const double inv_scale = static_cast<double>(static_cast<float>(1.0 / static_cast<double>(scale_)));
  // Every gradient is checked before any is changed, so that a refusal
  // leaves them all as they were (as torch).
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    const std::vector<Tensor>& params = optimizer.params(g);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor grad = params[i].grad();
      KILN_CHECK(!grad.defined() || grad.dtype() != DType::Float16, "GradScaler::unscale_: parameter ", i,
                 " of group ", g,
                 " has a float16 gradient; keep the parameters float32 (autocast casts copies of them) so that "
                 "the unscaled gradients and the update are float32");
    }
  }
  NoGradGuard no_grad;
  // The gradients by device (Note [Dynamic loss scaling]).
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    for (const Tensor& param : optimizer.params(g)) {
      const Tensor grad = param.grad();
      if (!grad.defined()) continue;
      auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == grad.device(); });
      if (it == by_device.end()) it = by_device.insert(by_device.end(), {grad.device(), {}});
      it->second.push_back(grad);
    }
  }
  record.has_grads = !by_device.empty();
  record.found_inf = false;
  for (const auto& [device, grads] : by_device) {
    // found: 0-dim, 0 while every unscaled element is finite.
    Tensor found = zeros({}, {DType::Float32, device});
    std::vector<Tensor> fused;
    for (Tensor grad : grads) {  // a handle: mul_ writes the gradient itself
      if (ops::unscale_grads_fusable({grad})) {
        fused.push_back(grad);
      } else {
        // grad * 0 is 0 where grad is finite and NaN where it is not, so
        // its sum flags a non-finite element and cannot itself overflow.
        ops::mul_(grad, inv_scale);
        found = ops::add(found, ops::sum(ops::mul(grad, 0.0)).to(DType::Float32));
      }
    }
    ops::unscale_grads_(fused, inv_scale, found);
    const float flag = found.item<float>();  // the host's one wait per device
    record.found_inf = record.found_inf || flag != 0.0f;
  }
  record.stage = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  KILN_CHECK(records_[&optimizer].stage != Stage::Stepped,
             "GradScaler::step: already called on this optimizer since the last update()");
  if (records_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  OptimizerRecord& record = records_[&optimizer];
  KILN_CHECK(record.has_grads,
             "GradScaler::step: no inf checks were recorded for this optimizer: none of its parameters has a "
             "gradient (call backward on scale(loss) first)");
  const bool stepped = !record.found_inf;
  if (stepped) optimizer.step();
  record.stage = Stage::Stepped;
  return stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool checked = false, found_inf = false;
  for (const auto& [optimizer, record] : records_) {
    checked = checked || record.has_grads;
    found_inf = found_inf || record.found_inf;
  }
  KILN_CHECK(checked,
             "GradScaler::update: no inf checks were recorded since the last update(); call step(optimizer) first");
  // torch's _amp_update_scale_, with the scale a float32.
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  records_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  KILN_CHECK(new_scale > 0 && std::isfinite(new_scale),
             "GradScaler::update: new_scale must be positive and finite, got ", new_scale);
  scale_ = static_cast<float>(new_scale);
  records_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? static_cast<double>(scale_) : 1.0; }

TensorDict GradScaler::state_dict() const {
  TensorDict dict;
  if (!options_.enabled) return dict;
  dict.insert("scale", scalar_tensor(static_cast<double>(scale_), DType::Float64));
  dict.insert("growth_factor", scalar_tensor(options_.growth_factor, DType::Float64));
  dict.insert("backoff_factor", scalar_tensor(options_.backoff_factor, DType::Float64));
  dict.insert("growth_interval", scalar_tensor(options_.growth_interval, DType::Int64));
  dict.insert("_growth_tracker", scalar_tensor(growth_tracker_, DType::Int64));
  return dict;
}

void GradScaler::load_state_dict(const TensorDict& dict) {
  if (!options_.enabled) return;
  KILN_CHECK(dict.size() != 0,
             "GradScaler::load_state_dict: the state dict is empty, possibly because it was saved from a disabled "
             "GradScaler");
  for (const auto& [key, t] : dict) {
    KILN_CHECK(key == "scale" || key == "growth_factor" || key == "backoff_factor" || key == "growth_interval" ||
                   key == "_growth_tracker",
               "GradScaler::load_state_dict: unexpected key '", key, "'");
  }
  GradScalerOptions loaded = options_;
  loaded.init_scale = entry(dict, "scale").item<double>();
  loaded.growth_factor = entry(dict, "growth_factor").item<double>();
  loaded.backoff_factor = entry(dict, "backoff_factor").item<double>();
  loaded.growth_interval = entry(dict, "growth_interval").item<int64_t>();
  const int64_t tracker = entry(dict, "_growth_tracker").item<int64_t>();
  check_options(loaded, "GradScaler::load_state_dict");
  KILN_CHECK(tracker >= 0 && tracker < loaded.growth_interval,
             "GradScaler::load_state_dict: _growth_tracker must be in [0, ", loaded.growth_interval, "), got ",
             tracker);
  options_ = loaded;
  scale_ = static_cast<float>(loaded.init_scale);
  growth_tracker_ = tracker;
}

}  // namespace kiln::optim
