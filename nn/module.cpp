// Module: registration, traversal, modes, to() and printing. The state dict
// lives in nn/state_dict.cpp.
#include "nn/module.h"
#include "nn/hook_table.h"

#include <cxxabi.h>

#include <cstdlib>
#include <sstream>
#include <unordered_set>

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/backend.h"

namespace kiln::nn {

// Note [Module backward hooks]
// A module's backward is not one node but whatever its forward recorded, so
// there is no single place where "the module's gradients" pass. As torch's
// BackwardHook does, a call to a module with backward hooks puts one
// identity node in front of the inputs that require grad and one behind
// the outputs that require grad. Backward reaches the output node first: it
// runs the backward pre-hooks on the gradients of the outputs (which may
// replace them) and keeps them; then the module's own nodes run; then the
// input node receives the gradients of the inputs and runs the backward
// hooks with both. When no input requires grad (the first layer of a
// network), the output node runs the backward hooks itself, with undefined
// input gradients, so that a hook still learns that the module's backward
// is done. The hooks are copied at forward time, so a hook added between
// forward and backward applies from the next forward. The identity nodes
// are the only change to the graph: without backward hooks, or with grad
// mode off, a call records nothing extra.
struct BackwardHookCall {
  Module* module = nullptr;
  std::shared_ptr<Module> keep_alive;  // the module, when a shared_ptr holds it
  HookList<BackwardPreHook> pre;
  HookList<BackwardHook> post;
  size_t num_inputs = 0;
  bool inputs_hooked = false;
  TensorList grad_outputs;
};

std::string type_name(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : type.name();
  std::free(demangled);
  // Drop the namespaces (and "(anonymous namespace)::" or "f()::" of local
  // classes), but not the "::" inside template arguments.
  size_t end = full.find('<');
  size_t colon = full.rfind("::", end == std::string::npos ? std::string::npos : end);
  return colon == std::string::npos ? full : full.substr(colon + 2);
}

namespace {

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// torch's _addindent: every line but the first is indented by `spaces`.
std::string indent_after_first_line(const std::string& text, int spaces) {
  std::vector<std::string> lines = split_lines(text);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) {
      out += '\n';
      out.append(static_cast<size_t>(spaces), ' ');
    }
    out += lines[i];
  }
  return out;
}

}  // namespace

void HookHandle::remove() {
  std::shared_ptr<HookTable> hooks = hooks_.lock();
  if (hooks) hooks->remove(id_);
}

Module::Module() : hooks_(std::make_shared<HookTable>()) {}

Module::Module(std::string name) : name_(std::move(name)), hooks_(std::make_shared<HookTable>()) {}

Module::~Module() = default;

// ---- forward ----

Tensor Module::operator()(const Tensor& input) {
  TensorList outputs = (*this)(TensorList{input});
  KILN_CHECK(outputs.size() == 1, name(), ": returned ", outputs.size(),
             " tensors; call it with a TensorList, (*m)({x}), to receive them all");
  return std::move(outputs[0]);
}

TensorList Module::operator()(const TensorList& inputs) {
  return call_with_hooks(inputs, [this](const TensorList& x) { return forward_many(x); });
}

TensorList Module::call_with_hooks(const TensorList& inputs,
                                   const std::function<TensorList(const TensorList&)>& body) {
  // Copies of the hook lists: a hook may remove itself (or others) while running.
  auto pre_hooks = hooks_->forward_pre;
  TensorList x = inputs;
  for (const auto& [id, hook] : pre_hooks) {
    if (auto replaced = hook(*this, x)) x = std::move(*replaced);
  }
  std::shared_ptr<BackwardHookCall> backward_call;
  if (GradMode::is_enabled() && (!hooks_->backward_pre.empty() || !hooks_->backward.empty())) {
    backward_call = std::make_shared<BackwardHookCall>();
    backward_call->module = this;
    backward_call->keep_alive = weak_from_this().lock();
    backward_call->pre = hooks_->backward_pre;
    backward_call->post = hooks_->backward;
    x = hook_inputs_for_backward(x, backward_call);
  }
  TensorList out = body(x);
  auto post_hooks = hooks_->forward;
  for (const auto& [id, hook] : post_hooks) {
    if (auto replaced = hook(*this, x, out)) out = std::move(*replaced);
  }
  if (backward_call) out = hook_outputs_for_backward(out, backward_call);
  return out;
}

Tensor Module::forward(const Tensor&) {
  KILN_FAIL(name(), ": forward(const Tensor&) is not implemented; a module called as (*m)(x) must override it ",
            "(or forward_many, for several tensors)");
}

TensorList Module::forward_many(const TensorList& inputs) {
  KILN_CHECK(inputs.size() == 1, name(), ": forward takes one tensor but was given ", inputs.size(),
             "; a module of several inputs overrides forward_many (Note [Modules of several tensors])");
  return {forward(inputs[0])};
}

void Module::check_single(const Module& module, const char* hook, const char* what, size_t count) {
  KILN_CHECK(count == 1, module.name(), ": a ", hook, " written for one tensor cannot take the ", count, " ", what,
             " of this call; write it over TensorLists (Note [Modules of several tensors])");
}

namespace {

// The positions of the tensors of `list` that require grad.
std::vector<size_t> requiring_grad(const TensorList& list) {
  std::vector<size_t> positions;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].defined() && list[i].requires_grad()) positions.push_back(i);
  }
  return positions;
}

// Runs `hooks` on `grads`, each on the result of the one before; a
// replacement must keep the number of gradients.
template <class Hook, class... Args>
TensorList run_gradient_hooks(const HookList<Hook>& hooks, Module& module, const char* kind, TensorList grads,
                              const Args&... more) {
  for (const auto& [id, hook] : hooks) {
    std::optional<TensorList> replaced = hook(module, grads, more...);
    if (!replaced) continue;
    KILN_CHECK(replaced->size() == grads.size(), module.name(), ": a ", kind, " returned ", replaced->size(),
               " gradients for ", grads.size());
    grads = std::move(*replaced);
  }
  return grads;
}

// Identity nodes over the tensors of `list` at `positions`: the list with
// those tensors replaced by aliases whose backward is `backward`, which
// receives and returns one gradient per position.
TensorList through_identity(const TensorList& list, const std::vector<size_t>& positions,
                            autograd::BackwardFn backward) {
  TensorList originals, aliases;
  for (size_t i : positions) {
    originals.push_back(list[i]);
    aliases.push_back(list[i].detach());
  }
  autograd::record("BackwardHookFunction", originals, aliases, std::move(backward));
  TensorList out = list;
  for (size_t k = 0; k < positions.size(); ++k) out[positions[k]] = aliases[k];
  return out;
}

}  // namespace

// Note [Module backward hooks].
TensorList Module::hook_inputs_for_backward(const TensorList& inputs, const std::shared_ptr<BackwardHookCall>& call) {
  call->num_inputs = inputs.size();
  const std::vector<size_t> positions = requiring_grad(inputs);
  call->inputs_hooked = !positions.empty();
  if (positions.empty()) return inputs;
  return through_identity(inputs, positions, [call, positions](const TensorList& grads) -> TensorList {
    TensorList grad_inputs(call->num_inputs);
    for (size_t k = 0; k < positions.size(); ++k) grad_inputs[positions[k]] = grads[k];
    grad_inputs = run_gradient_hooks(call->post, *call->module, "backward hook", std::move(grad_inputs),
                                     call->grad_outputs);
    TensorList out;
    for (size_t i : positions) out.push_back(grad_inputs[i]);
    return out;
  });
}

TensorList Module::hook_outputs_for_backward(const TensorList& outputs,
                                             const std::shared_ptr<BackwardHookCall>& call) {
  const std::vector<size_t> positions = requiring_grad(outputs);
  if (positions.empty()) return outputs;
  const size_t num_outputs = outputs.size();
  return through_identity(outputs, positions, [call, positions, num_outputs](const TensorList& grads) -> TensorList {
    TensorList grad_outputs(num_outputs);
    for (size_t k = 0; k < positions.size(); ++k) grad_outputs[positions[k]] = grads[k];
    grad_outputs = run_gradient_hooks(call->pre, *call->module, "backward pre-hook", std::move(grad_outputs));
    call->grad_outputs = grad_outputs;
    if (!call->inputs_hooked) {
      // No input needs a gradient: nothing to replace, only to observe.
      run_gradient_hooks(call->post, *call->module, "backward hook", TensorList(call->num_inputs), grad_outputs);
    }
    TensorList out;
    for (size_t i : positions) out.push_back(grad_outputs[i]);
    return out;
  });
}

HookHandle Module::add_forward_pre_hook(ForwardPreHook hook) {
  KILN_CHECK(hook, "register_forward_pre_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->forward_pre, std::move(hook)));
}

HookHandle Module::add_forward_hook(ForwardHook hook) {
  KILN_CHECK(hook, "register_forward_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->forward, std::move(hook)));
}

HookHandle Module::add_backward_pre_hook(BackwardPreHook hook) {
  KILN_CHECK(hook, "register_full_backward_pre_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->backward_pre, std::move(hook)));
}

HookHandle Module::add_backward_hook(BackwardHook hook) {
  KILN_CHECK(hook, "register_full_backward_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->backward, std::move(hook)));
}

HookHandle Module::register_state_dict_pre_hook(StateDictPreHook hook) {
  KILN_CHECK(hook, "register_state_dict_pre_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->state_dict_pre, std::move(hook)));
}

HookHandle Module::register_state_dict_hook(StateDictHook hook) {
  KILN_CHECK(hook, "register_state_dict_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->state_dict, std::move(hook)));
}

HookHandle Module::register_load_state_dict_pre_hook(LoadStateDictPreHook hook) {
  KILN_CHECK(hook, "register_load_state_dict_pre_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->load_state_dict_pre, std::move(hook)));
}

HookHandle Module::register_load_state_dict_post_hook(LoadStateDictHook hook) {
  KILN_CHECK(hook, "register_load_state_dict_post_hook: the hook of ", name(), " is empty");
  return HookHandle(hooks_, hooks_->add(hooks_->load_state_dict_post, std::move(hook)));
}

// ---- registration ----

void Module::check_new_name(const std::string& name, const char* op) const {
  KILN_CHECK(!name.empty(), op, ": the name must not be empty (in ", this->name(), ")");
  KILN_CHECK(name.find('.') == std::string::npos, op, ": the name '", name,
             "' contains '.', which separates the parts of dotted names (in ", this->name(), ")");
  for (const auto& [n, t] : params_)
    KILN_CHECK(n != name, op, ": ", this->name(), " already has a parameter named '", name, "'");
  for (const Buffer& b : buffers_)
    KILN_CHECK(b.name != name, op, ": ", this->name(), " already has a buffer named '", name, "'");
  for (const auto& [n, m] : children_)
    KILN_CHECK(n != name, op, ": ", this->name(), " already has a submodule named '", name, "'");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  if (tensor.defined()) {
    KILN_CHECK(tensor.is_leaf(), "register_parameter: '", name, "' of ", this->name(), " was computed by an op (",
               tensor.grad_fn_name(), "); register a leaf, e.g. its detach()");
    if (requires_grad || tensor.requires_grad()) tensor.requires_grad_(requires_grad);
  }
  params_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_new_name(name, "register_buffer");
  buffers_.push_back({name, tensor, persistent});
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  KILN_CHECK(module != nullptr, "register_module: submodule '", name, "' of ", this->name(), " is null");
  KILN_CHECK(module.get() != this, "register_module: ", this->name(), " cannot be its own submodule '", name, "'");
  children_.emplace_back(name, std::move(module));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  KILN_CHECK(module != nullptr, "replace_module: the replacement for submodule '", name, "' of ", this->name(),
             " is null");
  KILN_CHECK(module.get() != this, "replace_module: ", this->name(), " cannot be its own submodule '", name, "'");
  for (auto& [n, child] : children_) {
    if (n == name) {
      child = std::move(module);
      return;
    }
  }
  KILN_FAIL("replace_module: ", this->name(), " has no submodule named '", name, "' to replace");
}

// ---- traversal ----

void Module::visit(const std::string& path, std::unordered_set<const Module*>& seen,
                   const std::function<void(const std::string&, const Module&)>& fn) const {
  if (!seen.insert(this).second) return;
  fn(path, *this);
  for (const auto& [name, child] : children_) child->visit(join_path(path, name), seen, fn);
}

TensorDict Module::named_parameters(bool recurse) const {
  TensorDict out;
  std::unordered_set<const TensorImpl*> listed;
  auto add_own = [&](const std::string& path, const Module& m) {
    for (const auto& [name, t] : m.params_) {
      if (t.defined() && listed.insert(t.impl()).second) out.insert(join_path(path, name), t);
    }
  };
  if (recurse) {
    std::unordered_set<const Module*> seen;
    visit("", seen, add_own);
  } else {
    add_own("", *this);
  }
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (const auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

TensorDict Module::named_buffers(bool recurse) const {
  TensorDict out;
  std::unordered_set<const TensorImpl*> listed;
  auto add_own = [&](const std::string& path, const Module& m) {
    for (const Buffer& b : m.buffers_) {
      if (b.tensor.defined() && listed.insert(b.tensor.impl()).second) out.insert(join_path(path, b.name), b.tensor);
    }
  };
  if (recurse) {
    std::unordered_set<const Module*> seen;
    visit("", seen, add_own);
  } else {
    add_own("", *this);
  }
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (const auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<NamedModule> Module::named_children() const {
  std::vector<NamedModule> out;
  std::unordered_set<const Module*> seen;
  for (const auto& [name, child] : children_) {
    if (seen.insert(child.get()).second) out.emplace_back(name, child);
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, child] : named_children()) out.push_back(std::move(child));
  return out;
}

namespace {

void collect_named(const std::shared_ptr<Module>& module, const std::string& path,
                   std::unordered_set<const Module*>& seen, std::vector<NamedModule>& out) {
  if (!seen.insert(module.get()).second) return;
  out.emplace_back(path, module);
  for (const auto& [name, child] : module->named_children()) collect_named(child, join_path(path, name), seen, out);
}

}  // namespace

std::vector<NamedModule> Module::named_modules(const std::string& prefix, bool include_self) {
  std::vector<NamedModule> out;
  std::unordered_set<const Module*> seen;
  if (include_self) {
    std::shared_ptr<Module> self = weak_from_this().lock();
    KILN_CHECK(self != nullptr, "named_modules: ", name(),
               " is not held by a std::shared_ptr, so it cannot list itself; create it with std::make_shared, "
               "or pass include_self = false");
    collect_named(self, prefix, seen, out);
  } else {
    seen.insert(this);
    for (const auto& [name, child] : children_) collect_named(child, join_path(prefix, name), seen, out);
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, module] : named_modules("", include_self)) out.push_back(std::move(module));
  return out;
}

std::shared_ptr<Module> Module::get_submodule(const std::string& path) const {
  KILN_CHECK(!path.empty(), "get_submodule: the path is empty (in ", name(), ")");
  const Module* current = this;
  std::shared_ptr<Module> found;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    found = nullptr;
    for (const auto& [name, child] : current->children_) {
      if (name == part) found = child;
    }
    KILN_CHECK(found != nullptr, "get_submodule: ", current->name(), " has no submodule '", part, "' (in path '", path,
               "' of ", name(), ")");
    if (dot == std::string::npos) return found;
    current = found.get();
    start = dot + 1;
  }
}

namespace {

// "features.0.weight" -> {"features.0", "weight"}; {"", "weight"} without a dot.
std::pair<std::string, std::string> split_last(const std::string& path) {
  size_t dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

}  // namespace

Tensor Module::get_parameter(const std::string& path) const {
  auto [module_path, leaf] = split_last(path);
  std::shared_ptr<Module> holder_ptr = module_path.empty() ? nullptr : get_submodule(module_path);
  const Module& holder = holder_ptr ? *holder_ptr : *this;
  for (const auto& [name, t] : holder.params_) {
    if (name == leaf) return t;
  }
  KILN_FAIL("get_parameter: ", holder.name(), " has no parameter '", leaf, "' (in path '", path, "' of ", name(), ")");
}

Tensor Module::get_buffer(const std::string& path) const {
  auto [module_path, leaf] = split_last(path);
  std::shared_ptr<Module> holder_ptr = module_path.empty() ? nullptr : get_submodule(module_path);
  const Module& holder = holder_ptr ? *holder_ptr : *this;
  for (const Buffer& b : holder.buffers_) {
    if (b.name == leaf) return b.tensor;
  }
  KILN_FAIL("get_buffer: ", holder.name(), " has no buffer '", leaf, "' (in path '", path, "' of ", name(), ")");
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& child : children()) child->apply(fn);
  fn(*this);
  return *this;
}

Module& Module::train(bool on) {
  training_ = on;
  for (const auto& child : children()) child->train(on);
  return *this;
}

// ---- device and dtype ----

// Note [Module::to keeps parameter identity] in module.h.
static_assert(std::is_move_assignable_v<TensorImpl>,
              "Module::to assigns converted TensorImpls in place (Note [Module::to keeps parameter identity])");

namespace {

// Points `impl` at the memory of `converted`, which holds its values in a
// new dtype and/or on a new device.
void rebind(TensorImpl& impl, const Tensor& converted) {
  TensorImpl replacement(converted.storage(), converted.dtype(), converted.shape(), converted.strides(),
                         converted.storage_offset(), impl.version_counter());
  replacement.set_autograd_meta(impl.autograd_meta());
  replacement.set_quant_params(impl.quant_params());
  impl = std::move(replacement);
}

}  // namespace

Module& Module::convert(std::optional<Device> device, std::optional<DType> dtype) {
  KILN_CHECK(!dtype || is_floating(*dtype), "Module::to: only floating dtypes are accepted, got ", *dtype,
             " (integer buffers keep their dtype, as torch)");
  // Throws "Kiln was built without CUDA ..." up front, rather than an
  // allocator error from the first tensor.
  if (device) backend_for(*device);
  NoGradGuard no_grad;
  struct Move {
    Tensor tensor;
    Tensor converted;
    Tensor converted_grad;
  };
  // Everything is converted first and swapped in only when all conversions
  // succeeded, so a failure (no CUDA, out of memory) leaves the module as it was.
  std::vector<Move> moves;
  std::unordered_set<const TensorImpl*> planned;
  auto plan = [&](const Tensor& t) {
    if (!t.defined() || !planned.insert(t.impl()).second) return;
    DType new_dtype = dtype && t.is_floating_point() ? *dtype : t.dtype();
    Device new_device = device.value_or(t.device());
    if (new_dtype == t.dtype() && new_device == t.device()) return;
    Move move{t, t.detach().to(new_dtype, new_device), Tensor()};
    Tensor grad = t.grad();
    if (grad.defined()) move.converted_grad = grad.detach().to(new_dtype, new_device);
    moves.push_back(std::move(move));
  };
  std::unordered_set<const Module*> seen;
  visit("", seen, [&](const std::string&, const Module& m) {
    for (const auto& [name, t] : m.params_) plan(t);
    for (const Buffer& b : m.buffers_) plan(b.tensor);
  });
  for (const Move& move : moves) {
    rebind(*move.tensor.impl(), move.converted);
    if (move.converted_grad.defined()) move.tensor.set_grad(move.converted_grad);
  }
  return *this;
}

Module& Module::to(Device device) { return convert(device, std::nullopt); }

Module& Module::to(DType dtype) { return convert(std::nullopt, dtype); }

Module& Module::to(Device device, DType dtype) { return convert(device, dtype); }

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
      continue;
    }
    // A gradient made with create_graph carries history; zeroing it in place
    // must not be recorded, so it is cut off first (torch's detach_()).
    if (grad.requires_grad()) {
      grad = grad.detach();
      p.set_grad(grad);
    }
    kiln::zero_(grad);
  }
}

// ---- printing ----

std::string Module::name() const { return name_.empty() ? type_name(typeid(*this)) : name_; }

void Module::pretty_print(std::ostream& os) const {
  std::string extra = extra_repr();
  std::vector<std::string> extra_lines = extra.empty() ? std::vector<std::string>{} : split_lines(extra);
  std::vector<std::string> child_lines;
  for (const auto& [name, child] : children_) {
    std::ostringstream child_repr;
    child->pretty_print(child_repr);
    child_lines.push_back("(" + name + "): " + indent_after_first_line(child_repr.str(), 2));
  }
  os << name() << "(";
  if (extra_lines.size() == 1 && child_lines.empty()) {
    os << extra_lines[0];
  } else if (!extra_lines.empty() || !child_lines.empty()) {
    for (const std::string& line : extra_lines) os << "\n  " << line;
    for (const std::string& line : child_lines) os << "\n  " << line;
    os << "\n";
  }
  os << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  module.pretty_print(os);
  return os;
}

}  // namespace kiln::nn
