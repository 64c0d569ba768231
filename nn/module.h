// Module: the base of every layer, as torch.nn.Module / LibTorch's Module.
//
// A module owns named parameters (tensors an optimizer updates), named
// buffers (state that is saved but not trained, such as BatchNorm's running
// mean) and named submodules. Everything is reached by name, and names nest
// with dots: "features.0.weight" is parameter "weight" of submodule "0" of
// submodule "features". Modules are held by std::shared_ptr:
//
//   struct Net : kiln::nn::Module {
//     Net() {
//       fc = register_module("fc", std::make_shared<Linear>(84, 10));
//       scale = register_parameter("scale", kiln::ones({10}));
//     }
//     Tensor forward(const Tensor& x) override { return kiln::mul((*fc)(x), scale); }
//     std::shared_ptr<Linear> fc;
//     Tensor scale;
//   };
//   auto net = std::make_shared<Net>();
//   Tensor y = (*net)(x);   // runs hooks around forward()
//
// Members such as `fc` and `scale` above are handles to the same objects the
// module registered, and stay valid through to().
//
// Note [Module::to keeps parameter identity]
// net->to(device) and net->to(dtype) change the registered tensors in place:
// each parameter and buffer keeps its TensorImpl (so member handles, an
// optimizer built earlier, and autograd's AccumulateGrad nodes, which all hold
// that TensorImpl, see the converted tensor) and only its memory is replaced.
// A device move swaps the storage with TensorImpl::set_storage, as FSDP does.
// A dtype change cannot be expressed by set_storage, whose dtype is fixed, so
// the TensorImpl is assigned a new TensorImpl built on the converted storage,
// carrying over its autograd metadata (requires_grad, hooks) and quantization
// parameters. This is torch's `param.data = param.data.to(...)` (set_data).
// Optimizer *state* (Adam's moments) is not converted, so as in PyTorch,
// create the optimizer after moving the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::nn {

class Module;

using NamedModule = std::pair<std::string, std::shared_ptr<Module>>;

// Runs before forward(); a defined result replaces the input.
using ForwardPreHook = std::function<Tensor(Module& module, const Tensor& input)>;
// Runs after forward() with the input forward() saw; a defined result
// replaces the output.
using ForwardHook = std::function<Tensor(Module& module, const Tensor& input, const Tensor& output)>;

// What load_state_dict reports: keys the module has but the dict lacks, and
// keys the dict has that match nothing in the module (torch's _IncompatibleKeys).
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// The hooks of one module, shared with the handles that can remove them.
struct ForwardHookTable;

// "kiln::nn::Linear" -> "Linear": the unqualified name of a type, for printing.
std::string type_name(const std::type_info& type);

// Returned by register_forward_(pre_)hook. remove() unregisters the hook; it
// may be called more than once, and after the module is gone. Dropping the
// handle does not remove the hook (as torch's RemovableHandle).
class HookHandle {
 public:
  HookHandle() = default;
  void remove();

 private:
  friend class Module;
  HookHandle(std::weak_ptr<ForwardHookTable> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}

  std::weak_ptr<ForwardHookTable> hooks_;
  uint64_t id_ = 0;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  // name() is the unqualified type name of the most derived class ("Linear").
  Module();
  // name() is `name`.
  explicit Module(std::string name);
  virtual ~Module();
  // A module owns its registrations and hooks; copying one would share the
  // tensors but not the structure, so it is forbidden.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- forward ----
  // Runs the forward pre-hooks, forward(), then the forward hooks, each in
  // registration order.
  Tensor operator()(const Tensor& input);
  // The computation of the module. The default throws naming the module, for
  // modules that are only containers.
  virtual Tensor forward(const Tensor& input);

  // ---- registration ----
  // Names are non-empty, contain no '.', and are unique among this module's
  // parameters, buffers and submodules. The tensor itself is registered (not
  // a copy): the returned handle is the parameter. An undefined tensor
  // registers an absent parameter (a Linear without bias): it is skipped by
  // parameters() and state_dict(). A defined one must be a leaf; requires_grad
  // is set on it as asked.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // Buffers are saved by state_dict() unless `persistent` is false; they
  // follow to() like parameters.
  Tensor register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from kiln::nn::Module");
    add_child(name, module);
    return module;
  }
  // Puts `module` in place of the submodule registered as `name`, at the same
  // place in the registration order (so state-dict keys and their order are
  // kept), and returns it, as LibTorch's replace_module. Only the registry
  // changes: a member handle, or a container's own list (Sequential's),
  // still points at the old module, so assign the member too:
  //   fc = replace_module("fc", std::make_shared<Linear>(84, 20));
  // distributed::convert_sync_batchnorm swaps BatchNorm layers with it.
  template <class M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "replace_module: M must derive from kiln::nn::Module");
    replace_child(name, module);
    return module;
  }

  // ---- traversal ----
  // Defined parameters of this module, then (recurse) of its submodules in
  // registration order, depth first. A tensor registered twice (tied weights)
  // is listed once, under its first name.
  std::vector<Tensor> parameters(bool recurse = true) const;
  TensorDict named_parameters(bool recurse = true) const;
  // Defined buffers, persistent or not, in the same order.
  std::vector<Tensor> buffers(bool recurse = true) const;
  TensorDict named_buffers(bool recurse = true) const;
  // Direct submodules; a module registered twice is listed once.
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<NamedModule> named_children() const;
  // This module (named `prefix`, "" by default) then every submodule, depth
  // first, each once. Including this module needs it held by a shared_ptr.
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  std::vector<NamedModule> named_modules(const std::string& prefix = "", bool include_self = true);
  // By dotted path, as torch's get_parameter / get_buffer / get_submodule;
  // throw naming the part of the path that does not exist. An absent
  // parameter (registered undefined) comes back undefined.
  Tensor get_parameter(const std::string& path) const;
  Tensor get_buffer(const std::string& path) const;
  std::shared_ptr<Module> get_submodule(const std::string& path) const;

  // Calls fn on every submodule (depth first, children before their parent,
  // as torch) and then on this module: net->apply(init_weights).
  Module& apply(const std::function<void(Module&)>& fn);

  // ---- mode ----
  // Sets training mode on this module and every submodule (Dropout and
  // BatchNorm behave differently in eval mode).
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // ---- device and dtype ----
  // Moves every parameter, buffer and gradient to `device`, in place
  // (Note [Module::to keeps parameter identity]). Throws before changing
  // anything if one of them cannot be moved (e.g. no CUDA).
  Module& to(Device device);
  // Converts the floating parameters, buffers and gradients to the floating
  // `dtype`; integer buffers (a step counter) keep theirs, as torch.
  Module& to(DType dtype);
  Module& to(Device device, DType dtype);

  // Clears the gradient of every parameter (set_to_none, the default, as
  // torch 2), or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  // ---- state dict (nn/state_dict.cpp) ----
  // Parameters and persistent buffers by dotted name: this module's, then
  // each submodule's. The values are the module's tensors detached (they
  // share memory), as torch's state_dict().
  TensorDict state_dict() const;
  // Copies every entry of `state` into the tensor of the same name, in
  // place, converting dtype and device (so optimizers keep working). In strict
  // mode, a missing or unexpected key is an error; a shape mismatch always is.
  // All problems are reported in one kiln::Error, before anything is copied.
  IncompatibleKeys load_state_dict(const TensorDict& state, bool strict = true);

  // ---- hooks ----
  // A hook may return Tensor (defined = replaces input / output) or void.
  //   auto h = net->register_forward_hook([](Module& m, const Tensor& in, const Tensor& out) { ... });
  //   h.remove();
  template <class F>
  HookHandle register_forward_pre_hook(F&& hook) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, const Tensor&>>) {
      return add_forward_pre_hook([h = std::forward<F>(hook)](Module& m, const Tensor& in) mutable {
        h(m, in);
        return Tensor();
      });
    } else {
      return add_forward_pre_hook(ForwardPreHook(std::forward<F>(hook)));
    }
  }
  template <class F>
  HookHandle register_forward_hook(F&& hook) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, const Tensor&, const Tensor&>>) {
      return add_forward_hook([h = std::forward<F>(hook)](Module& m, const Tensor& in, const Tensor& out) mutable {
        h(m, in, out);
        return Tensor();
      });
    } else {
      return add_forward_hook(ForwardHook(std::forward<F>(hook)));
    }
  }

  // ---- printing ----
  // The type name ("Linear"), or the name given to the constructor.
  std::string name() const;
  // The module's own settings for printing, e.g. "in_features=84, out_features=10, bias=true".
  virtual std::string extra_repr() const { return ""; }
  // torch's repr: "Sequential(\n  (0): Linear(...)\n  (1): ReLU()\n)".
  void pretty_print(std::ostream& os) const;

 private:
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent;
  };
  void check_new_name(const std::string& name, const char* op) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void replace_child(const std::string& name, std::shared_ptr<Module> module);
  HookHandle add_forward_pre_hook(ForwardPreHook hook);
  HookHandle add_forward_hook(ForwardHook hook);
  Module& convert(std::optional<Device> device, std::optional<DType> dtype);
  // Calls fn(path, module) on this module and every submodule not in `seen`,
  // depth first, in registration order.
  void visit(const std::string& path, std::unordered_set<const Module*>& seen,
             const std::function<void(const std::string& path, const Module& module)>& fn) const;
  // Parameters and persistent buffers as registered (not detached), by dotted name.
  void collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;

  std::string name_;  // empty: derived from the dynamic type
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<Buffer> buffers_;
  std::vector<NamedModule> children_;
  std::shared_ptr<ForwardHookTable> hooks_;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace kiln::nn
