// Module::state_dict and load_state_dict, with torch's key rules and messages.
#include <unordered_set>

#include "autograd/grad_mode.h"
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

TensorDict Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> entries;
  collect_state("", entries);
  TensorDict out;
  for (const auto& [name, t] : entries) out.insert(name, t.detach());
  return out;
}

IncompatibleKeys Module::load_state_dict(const TensorDict& state, bool strict) {
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
  return result;
}

}  // namespace kiln::nn
