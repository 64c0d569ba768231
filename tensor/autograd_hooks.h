// The seam between the tensor layer and autograd.
//
// Note [Autograd hooks]
// tensor/ knows nothing of gradients, yet a user expects `w.grad()`,
// `loss.backward()` and a differentiable `x.view(...)` on the Tensor itself,
// as in LibTorch. PyTorch solves the same layering problem with
// VariableHooksInterface: ATen declares an interface, the autograd library
// registers the implementation when it loads. Kiln does the same:
//
// - the Tensor methods about gradients (requires_grad, grad, backward, hooks)
//   forward to the registered AutogradHooks;
// - every view method and every copy (contiguous, clone, to) reports its
//   result here when the input takes part in autograd (it has an
//   AutogradMeta). The tensor layer only says "this is a view of that, and
//   `replay` makes the same view of any tensor of that shape" or "this is a
//   converted copy of that"; autograd/variable.cpp decides what it means for
//   gradients.
//
// autograd/variable.cpp registers the implementation from a static
// initializer, which runs when libkiln is loaded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace kiln {

class Tensor;

// How a view relates to its base, for the backward of the view.
enum class ViewKind : uint8_t {
  Alias,   // each view element is a distinct base element (view, permute, narrow, ...)
  Expand,  // base elements repeat in the view (stride-0 dims): backward sums
};

// Makes, from a tensor of the base's shape, the view that a view op made of the base.
using ViewReplay = std::function<Tensor(const Tensor&)>;

class AutogradHooks {
 public:
  virtual ~AutogradHooks() = default;

  virtual bool requires_grad(const Tensor& t) const = 0;
  virtual void set_requires_grad(const Tensor& t, bool requires_grad) const = 0;
  virtual Tensor grad(const Tensor& t) const = 0;
  virtual void set_grad(const Tensor& t, const Tensor& grad) const = 0;
  virtual bool is_leaf(const Tensor& t) const = 0;
  virtual std::string grad_fn_name(const Tensor& t) const = 0;
  virtual void backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph) const = 0;
  virtual void retain_grad(const Tensor& t) const = 0;
  virtual int64_t register_hook(const Tensor& t, std::function<Tensor(const Tensor&)> hook) const = 0;
  virtual int64_t register_post_accumulate_grad_hook(const Tensor& t,
                                                     std::function<void(const Tensor&)> hook) const = 0;
  virtual void remove_hook(const Tensor& t, int64_t handle) const = 0;

  // Called by the view methods when `base` has autograd metadata. `replay`
  // may be empty when the view cannot be replayed (as_strided of a
  // non-contiguous base); backward through it then throws.
  virtual void record_view(std::string_view op, const Tensor& base, const Tensor& view, ViewReplay replay,
                           ViewKind kind) const = 0;
  // Called by contiguous/clone/to when `input` has autograd metadata: `output`
  // holds the same values, maybe in another dtype or on another device.
  virtual void record_copy(std::string_view op, const Tensor& input, const Tensor& output) const = 0;
  // Called before an in-place write into `dst` (from `src`, which may be
  // undefined); throws when the write would corrupt a gradient.
  virtual void check_inplace(std::string_view op, const Tensor& dst, const Tensor& src) const = 0;
};

void set_autograd_hooks(const AutogradHooks* hooks);
// The registered hooks; throws kiln::Error if none is (libkiln without autograd/).
const AutogradHooks& autograd_hooks();

}  // namespace kiln
