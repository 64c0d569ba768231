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
// A conversion assigns the TensorImpl a new TensorImpl built on the
// converted storage (FSDP's swaps use TensorImpl::set_storage instead, Note
// [Swapping a tensor's storage], which keeps no more than this does),
// carrying over what belongs to the tensor: its autograd metadata
// (requires_grad, hooks), quantization parameters and version counter (Note
// [Version counter]). This is torch's `param.data = param.data.to(...)` (set_data).
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

// What load_state_dict reports: keys the module has but the dict lacks, and
// keys the dict has that match nothing in the module (torch's _IncompatibleKeys).
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// Note [Modules of several tensors]
// Most modules take one tensor and return one, and write
//   Tensor forward(const Tensor& x) override;
// A module that needs several (attention's input and mask, a pipeline
// stage's activations, a tensor-parallel layer's output and bias) writes
//   TensorList forward_many(const TensorList& inputs) override;
// and is called with a list: auto outs = (*attention)({x, mask}) (a list of
// one is written TensorList{x}, since {x} alone is the tensor). The two
// are one path: (*m)(x) is (*m)({x}) with its single output unwrapped, and
// the default forward_many calls forward on a single input. So hooks,
// containers and wrappers (Sequential, DDP, DataParallel) handle one form
// only, the list, and every existing layer works in it unchanged.
// LibTorch lets forward have any signature and type-erases it (AnyModule)
// for containers; in C++ that costs a template layer and an `any` on every
// call, and hooks that see "every input" could not be written once. A
// tensor list is what autograd's Function already takes and returns, what
// a pipeline stage sends, and what a hook can read, replace and index.
// Non-tensor arguments (a flag, a KV-cache position) belong in the
// module's own members, set before the call.
//
// Hooks (all kept in registration order; HookHandle removes any kind):
// - forward pre-hooks see the inputs and may replace them; forward hooks see
//   the inputs forward saw and its outputs, and may replace the outputs.
//   A hook written for one tensor, (Module&, const Tensor&), is accepted
//   and refuses (naming the module) a call with several.
// - backward pre-hooks see the gradients of the outputs before the module's
//   backward and may replace them; backward hooks see the gradients of the
//   inputs and of the outputs, and may replace those of the inputs
//   (torch's register_full_backward_pre_hook / register_full_backward_hook).
//   They run from identity nodes on the inputs and the outputs
//   (Note [Module backward hooks] in module.cpp): the module's own nodes
//   still compute every gradient, the hooks only see or replace them.
// - state-dict hooks run around state_dict() and load_state_dict() of the
//   module and receive the key prefix of the module (torch's
//   register_state_dict_pre_hook and post, register_load_state_dict_pre_hook
//   and post): a post hook of state_dict() and a pre hook of
//   load_state_dict() may rewrite keys and tensors of the whole dict.
using TensorList = std::vector<Tensor>;

// A hook returning a value replaces what it was given; std::nullopt keeps it.
using ForwardPreHook = std::function<std::optional<TensorList>(Module& module, const TensorList& inputs)>;
using ForwardHook =
    std::function<std::optional<TensorList>(Module& module, const TensorList& inputs, const TensorList& outputs)>;
// Gradients are undefined where none flows (an input that needs none).
using BackwardPreHook = std::function<std::optional<TensorList>(Module& module, const TensorList& grad_outputs)>;
using BackwardHook = std::function<std::optional<TensorList>(Module& module, const TensorList& grad_inputs,
                                                             const TensorList& grad_outputs)>;
// `prefix` is the module's path with a trailing dot ("features.0."), or "".
using StateDictPreHook = std::function<void(const Module& module, const std::string& prefix)>;
// May change `state`: keys below `prefix` are this module's.
using StateDictHook = std::function<void(const Module& module, TensorDict& state, const std::string& prefix)>;
using LoadStateDictPreHook = std::function<void(Module& module, TensorDict& state, const std::string& prefix)>;
// May change what load_state_dict returns.
using LoadStateDictHook = std::function<void(Module& module, IncompatibleKeys& keys)>;

// The hooks of one module, shared with the handles that can remove them.
struct HookTable;
// One call's backward hooks, shared by its identity nodes (module.cpp).
struct BackwardHookCall;

// "kiln::nn::Linear" -> "Linear": the unqualified name of a type, for printing.
std::string type_name(const std::type_info& type);

// Returned by every register_*_hook. remove() unregisters the hook; it
// may be called more than once, and after the module is gone. Dropping the
// handle does not remove the hook (as torch's RemovableHandle).
class HookHandle {
 public:
  HookHandle() = default;
  void remove();

 private:
  friend class Module;
  HookHandle(std::weak_ptr<HookTable> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}

  std::weak_ptr<HookTable> hooks_;
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

  // ---- forward (Note [Modules of several tensors]) ----
  // Runs the forward pre-hooks, forward_many(), then the forward hooks, each
  // in registration order, and sets up the backward hooks.
  TensorList operator()(const TensorList& inputs);
  // The same for one input; throws naming the module if it returns several.
  Tensor operator()(const Tensor& input);
  // The hooks of this module around `body` in place of forward_many, for a
  // wrapper that computes this module's forward its own way (DataParallel
  // splits the batch between replicas) and whose users' hooks should see
  // the whole call.
  TensorList call_with_hooks(const TensorList& inputs, const std::function<TensorList(const TensorList&)>& body);
  // The computation of the module on one tensor. The default throws naming
  // the module, for modules that are only containers or take several.
  virtual Tensor forward(const Tensor& input);
  // The computation on several tensors. The default takes exactly one
  // input and returns {forward(input)}.
  virtual TensorList forward_many(const TensorList& inputs);

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

  // ---- hooks (Note [Modules of several tensors]) ----
  // Forward hooks take one tensor or a TensorList, and return void, a
  // replacement of the same form (an undefined Tensor keeps the original),
  // or std::optional<TensorList>:
  //   auto h = net->register_forward_hook([](Module& m, const Tensor& in, const Tensor& out) { ... });
  //   attention->register_forward_pre_hook([](Module&, const TensorList& in) { return TensorList{in[0], causal}; });
  //   h.remove();
  template <class F>
  HookHandle register_forward_pre_hook(F&& hook) {
    if constexpr (std::is_invocable_v<F&, Module&, const Tensor&>) {
      return add_forward_pre_hook([h = std::forward<F>(hook)](Module& m, const TensorList& in) mutable {
        check_single(m, "forward pre-hook", "inputs", in.size());
        return as_replacement([&] { return h(m, in[0]); });
      });
    } else {
      return add_forward_pre_hook([h = std::forward<F>(hook)](Module& m, const TensorList& in) mutable {
        return as_replacement([&] { return h(m, in); });
      });
    }
  }
  template <class F>
  HookHandle register_forward_hook(F&& hook) {
    if constexpr (std::is_invocable_v<F&, Module&, const Tensor&, const Tensor&>) {
      return add_forward_hook(
          [h = std::forward<F>(hook)](Module& m, const TensorList& in, const TensorList& out) mutable {
            check_single(m, "forward hook", "inputs", in.size());
            check_single(m, "forward hook", "outputs", out.size());
            return as_replacement([&] { return h(m, in[0], out[0]); });
          });
    } else {
      return add_forward_hook(
          [h = std::forward<F>(hook)](Module& m, const TensorList& in, const TensorList& out) mutable {
            return as_replacement([&] { return h(m, in, out); });
          });
    }
  }
  // Backward hooks take TensorLists and return void or
  // std::optional<TensorList> (one gradient per input or output):
  //   net->register_full_backward_hook([](Module&, const TensorList& grad_in, const TensorList& grad_out) { ... });
  template <class F>
  HookHandle register_full_backward_pre_hook(F&& hook) {
    return add_backward_pre_hook([h = std::forward<F>(hook)](Module& m, const TensorList& grad_out) mutable {
      return as_replacement([&] { return h(m, grad_out); });
    });
  }
  template <class F>
  HookHandle register_full_backward_hook(F&& hook) {
    return add_backward_hook(
        [h = std::forward<F>(hook)](Module& m, const TensorList& grad_in, const TensorList& grad_out) mutable {
          return as_replacement([&] { return h(m, grad_in, grad_out); });
        });
  }
  HookHandle register_state_dict_pre_hook(StateDictPreHook hook);
  HookHandle register_state_dict_hook(StateDictHook hook);
  HookHandle register_load_state_dict_pre_hook(LoadStateDictPreHook hook);
  HookHandle register_load_state_dict_post_hook(LoadStateDictHook hook);

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
  HookHandle add_backward_pre_hook(BackwardPreHook hook);
  HookHandle add_backward_hook(BackwardHook hook);
  // Throws naming the module when a one-tensor hook sees `count` tensors.
  static void check_single(const Module& module, const char* hook, const char* what, size_t count);
  // A hook's result as a replacement: void and an undefined Tensor keep
  // what the hook was given.
  template <class Call>
  static std::optional<TensorList> as_replacement(Call&& call) {
    using R = decltype(call());
    if constexpr (std::is_void_v<R>) {
      call();
      return std::nullopt;
    } else if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
      Tensor t = call();
      if (!t.defined()) return std::nullopt;
      return TensorList{std::move(t)};
    } else {
      return std::optional<TensorList>(call());
    }
  }
  // Wraps `outputs` (and, before forward, `inputs`) in the identity nodes
  // that run the backward hooks (Note [Module backward hooks]).
  TensorList hook_inputs_for_backward(const TensorList& inputs, const std::shared_ptr<BackwardHookCall>& call);
  TensorList hook_outputs_for_backward(const TensorList& outputs, const std::shared_ptr<BackwardHookCall>& call);
  // state_dict() and load_state_dict() of this module below `prefix`.
  void save_state(const std::string& prefix, TensorDict& out) const;
  void run_load_pre_hooks(const std::string& prefix, TensorDict& state);
  void run_load_post_hooks(IncompatibleKeys& result, std::unordered_set<const Module*>& seen);
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
  std::shared_ptr<HookTable> hooks_;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace kiln::nn
