// Grad mode: whether ops record a graph, per thread, as torch.is_grad_enabled.
//
//   {
//     kiln::NoGradGuard no_grad;   // e.g. around an optimizer step or evaluation
//     ...
//   }
#pragma once

namespace kiln {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Sets grad mode for its scope and restores the previous one on exit.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

// No graph is recorded in its scope, as torch.no_grad().
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

// Recording back on inside a NoGradGuard, as torch.enable_grad().
class EnableGradGuard : public AutoGradMode {
 public:
  EnableGradGuard() : AutoGradMode(true) {}
};

// Inference mode, as torch.inference_mode(): no graph is recorded, and
// InferenceMode::is_enabled() lets code skip work only training needs.
// Unlike torch, tensors made inside are ordinary tensors (Kiln has no
// separate inference-tensor kind), so using them later in autograd is safe.
class InferenceMode {
 public:
  InferenceMode();
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled();

 private:
  bool previous_grad_;
  bool previous_inference_;
};

}  // namespace kiln
