// Module::state_dict and load_state_dict, with torch's key rules and messages.
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "nn/hook_table.h"
#include "nn/module.h"

namespace kiln::nn {

namespace {

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", \"" : "\"") + keys[i] + "\"";
  return out;
}

}  // namespace

// Submodules registered twice appear under each of their names, as in torch:
// a checkpoint then loads into either path.
void Module::collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : params_) {
    if (t.defined()) out.emplace_back(prefix + name, t);
  }
  for (const Buffer& b : buffers_) {
    if (b.tensor.defined() && b.persistent) out.emplace_back(prefix + b.name, b.tensor);
  }
  for (const auto& [name, child] : children_) child->collect_state(prefix + name + ".", out);
}

// The same walk as collect_state, with each module's state-dict hooks
// around its own part, as torch's state_dict(prefix=...) recursion: a post
// hook sees the entries of the module and of its submodules.
void Module::save_state(const std::string& prefix, TensorDict& out) const {
  auto pre_hooks = hooks_->state_dict_pre;
  for (const auto& [id, hook] : pre_hooks) hook(*this, prefix);
  for (const auto& [name, t] : params_) {
    if (t.defined()) out.insert(prefix + name, t.detach());
  }
  for (const Buffer& b : buffers_) {
    if (b.tensor.defined() && b.persistent) out.insert(prefix + b.name, b.tensor.detach());
  }
  for (const auto& [name, child] : children_) child->save_state(prefix + name + ".", out);
  auto post_hooks = hooks_->state_dict;
  for (const auto& [id, hook] : post_hooks) hook(*this, out, prefix);
}

TensorDict Module::state_dict() const {
  TensorDict out;
  save_state("", out);
  return out;
}

void Module::run_load_pre_hooks(const std::string& prefix, TensorDict& state) {
  auto hooks = hooks_->load_state_dict_pre;
  for (const auto& [id, hook] : hooks) hook(*this, state, prefix);
  for (const auto& [name, child] : children_) child->run_load_pre_hooks(prefix + name + ".", state);
}

// Each module once, depth first, as torch's loop over self.modules().
void Module::run_load_post_hooks(IncompatibleKeys& result, std::unordered_set<const Module*>& seen) {
  if (!seen.insert(this).second) return;
  auto hooks = hooks_->load_state_dict_post;
  for (const auto& [id, hook] : hooks) hook(*this, result);
  for (const auto& [name, child] : children_) child->run_load_post_hooks(result, seen);
}

// The pre hooks rewrite a copy of `state_in` (sharing its tensors) before
// any key is checked, so that a hook can turn another layout's keys (a
// sharded checkpoint's) into this module's. The post hooks run after the
// copy and may change the result; as the checks come before anything is
// copied, in strict mode a bad key is an error before they run, so a hook
// that accepts other keys does so in a pre hook.
IncompatibleKeys Module::load_state_dict(const TensorDict& state_in, bool strict) {
  TensorDict state = state_in;
  run_load_pre_hooks("", state);
  std::vector<std::pair<std::string, Tensor>> targets;
  collect_state("", targets);

  IncompatibleKeys result;
  std::vector<std::string> mismatches;  // errors even when not strict
  std::unordered_set<std::string> expected;
  for (const auto& [key, target] : targets) {
    expected.insert(key);
    if (!state.contains(key)) {
      result.missing_keys.push_back(key);
      continue;
    }
    // TensorDict holds only defined tensors, so every entry has a shape.
    const Tensor& source = state.at(key);
    if (source.shape() != target.shape()) {
      mismatches.push_back(kiln::detail::str("size mismatch for ", key, ": copying a param with shape ",
                                             source.shape(), " from checkpoint, the shape in current model is ",
                                             target.shape(), "."));
    }
  }
  for (const auto& [key, tensor] : state) {
    if (!expected.count(key)) result.unexpected_keys.push_back(key);
  }

  std::vector<std::string> errors;
  if (strict && !result.missing_keys.empty()) {
    errors.push_back("Missing key(s) in state_dict: " + quoted_list(result.missing_keys) + ".");
  }
  if (strict && !result.unexpected_keys.empty()) {
    errors.push_back("Unexpected key(s) in state_dict: " + quoted_list(result.unexpected_keys) + ".");
  }
  errors.insert(errors.end(), mismatches.begin(), mismatches.end());
  if (!errors.empty()) {
    std::string message = "Error(s) in loading state_dict for " + name() + ":";
    for (const std::string& error : errors) message += "\n\t" + error;
    KILN_FAIL(message);
  }

  // In place, so that the module's members and an optimizer holding the
  // parameters see the loaded values; copy_ converts dtype and device.
  NoGradGuard no_grad;
  for (auto& [key, target] : targets) {
    if (state.contains(key)) target.copy_(state.at(key));
  }
  std::unordered_set<const Module*> seen;
  run_load_post_hooks(result, seen);
  return result;
}

}  // namespace kiln::nn
