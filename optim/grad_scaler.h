// Dynamic loss scaling for float16 training, as torch.amp.GradScaler.
//
//   GradScaler scaler;   // init_scale 65536, growth x2 every 2000 clean steps, backoff x0.5
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss;
//     {
//       AutocastGuard autocast(DeviceType::CUDA, DType::Float16);
//       loss = F::cross_entropy(model(x), y);
//     }
//     scaler.scale(loss).backward();
//     scaler.unscale_(optimizer);          // optional: before clip_grad_norm_ and the like
//     scaler.step(optimizer);              // skipped when a gradient holds inf or NaN
//     scaler.update();
//   }
//
// Note [Dynamic loss scaling]
// float16 has 5 exponent bits: gradients below 6e-8 flush to zero and
// activations' gradients often live there. Multiplying the loss by a large
// scale S before backward moves every gradient up by S (backward is linear
// in the loss's gradient) into float16's range; dividing the float32
// parameter gradients by S before the update (unscale_) undoes it exactly
// when S is a power of two. Too large an S overflows some gradient to inf;
// then the step is skipped and S halves (backoff_factor). After
// growth_interval steps in a row without overflow S doubles
// (growth_factor), so S hovers just below the largest scale that does not
// overflow. The update rule, per update():
//   found inf:  S = S * backoff_factor, tracker = 0
//   otherwise:  tracker + 1 == growth_interval ? (S = S * growth_factor if finite, tracker = 0)
//                                              : tracker = tracker + 1
// with S a float32, exactly as torch's _amp_update_scale_. bfloat16 has
// float32's exponent range and needs no scaling: use enabled=false, which
// makes every member a pass-through (scale() returns the loss, step() just
// steps), so one training loop serves both.
//
// unscale_ multiplies every gradient by 1/S and checks every product for
// inf and NaN in one pass (ops::unscale_grads_, as torch's
// _amp_foreach_non_finite_check_and_unscale_: on CUDA one launch for up to
// 32 gradients), raising a flag on the gradients' device that the host reads
// once per device and optimizer: a step costs one device-to-host read.
// Gradients the fused pass does not take (bfloat16, non-contiguous) are
// multiplied by their own op and add sum(grad * 0) to the flag, which is
// NaN exactly when an element is not finite.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "optim/optimizer.h"
#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  // Throws kiln::Error for init_scale <= 0, growth_factor <= 1,
  // backoff_factor outside (0, 1) or growth_interval < 1.
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale, computed in float32 at least (a float16 loss times 65536
  // would overflow). Returns `loss` itself when disabled.
  Tensor scale(const Tensor& loss) const;

  // Divides the gradients of `optimizer`'s parameters by the scale, in
  // place, and records whether any is inf or NaN. At most once per
  // optimizer between update()s, and before step(); throws kiln::Error
  // otherwise, or for a float16 gradient (the parameters must stay float32:
  // autocast casts copies of them). A no-op when disabled.
  void unscale_(Optimizer& optimizer);

  // Unscales (unless unscale_ already did) and runs optimizer.step() when
  // no gradient holds inf or NaN. Returns whether it stepped. Throws when
  // called twice before update(), or when no parameter has a gradient.
  // When disabled, just steps.
  bool step(Optimizer& optimizer);

  // The scale for the next iteration from this one's inf checks (Note
  // [Dynamic loss scaling]), and the per-optimizer records cleared. Throws
  // if no optimizer was unscaled or stepped since the last update. A no-op
  // when disabled.
  void update();
  // Sets the scale to new_scale (> 0) instead, and clears the records.
  void update(double new_scale);

  // The current scale (a float32 value); 1.0 when disabled.
  double get_scale() const;
  bool is_enabled() const { return options_.enabled; }
  double get_growth_factor() const { return options_.growth_factor; }
  double get_backoff_factor() const { return options_.backoff_factor; }
  int64_t get_growth_interval() const { return options_.growth_interval; }
  // Clean steps in a row since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }

  // torch's keys as 0-dim tensors: "scale", "growth_factor",
  // "backoff_factor" (float64), "growth_interval", "_growth_tracker"
  // (int64); empty when disabled. They go to a training checkpoint under
  // "grad_scaler." (optim/training_checkpoint.h).
  TensorDict state_dict() const;
  // Throws naming the key on a missing key or a value out of range, or for
  // an empty dict (saved from a disabled scaler); then nothing changes. A
  // no-op when disabled.
  void load_state_dict(const TensorDict& dict);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerRecord {
    Stage stage = Stage::Ready;
    bool found_inf = false;
    bool has_grads = false;
  };

  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  std::unordered_map<const Optimizer*, OptimizerRecord> records_;
};

}  // namespace kiln::optim
