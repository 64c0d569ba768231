#include "autograd/grad_mode.h"

namespace kiln {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_inference = false;
}  // namespace

bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

InferenceMode::InferenceMode() : previous_grad_(t_grad_enabled), previous_inference_(t_inference) {
  t_grad_enabled = false;
  t_inference = true;
}

InferenceMode::~InferenceMode() {
  t_grad_enabled = previous_grad_;
  t_inference = previous_inference_;
}

bool InferenceMode::is_enabled() { return t_inference; }

}  // namespace kiln
