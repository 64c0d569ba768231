// AutogradMeta, leaf gradient accumulation, and the AutogradHooks that give
// Tensor its autograd methods (Note [Autograd hooks] in tensor/autograd_hooks.h).
#include "autograd/variable.h"

#include <algorithm>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/autograd_hooks.h"
#include "tensor/ops.h"

namespace kiln::autograd {

AutogradMetaImpl* meta_of(const Tensor& t) { return static_cast<AutogradMetaImpl*>(t.impl()->autograd_meta().get()); }

AutogradMetaImpl& ensure_meta(const Tensor& t) {
  if (!t.impl()->autograd_meta()) t.impl()->set_autograd_meta(std::make_shared<AutogradMetaImpl>());
  return *meta_of(t);
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMetaImpl& meta = ensure_meta(t);
  meta.grad_fn = node;
  meta.output_nr = output_nr;
  meta.requires_grad = true;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMetaImpl* meta = meta_of(t);
  if (meta == nullptr) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  std::shared_ptr<Node> accumulator = meta->grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(t);
    accumulator->inputs().push_back(TensorGeometry::of(t));
    accumulator->outputs().push_back(TensorGeometry::of(t));
    meta->grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

void ViewGroup::add(const std::shared_ptr<TensorImpl>& member) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(members_, [](const std::weak_ptr<TensorImpl>& m) { return m.expired(); });
  members_.push_back(member);
}

bool ViewGroup::has_other_than(const TensorImpl* t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(members_.begin(), members_.end(), [t](const std::weak_ptr<TensorImpl>& m) {
    std::shared_ptr<TensorImpl> alive = m.lock();
    return alive && alive.get() != t;
  });
}

namespace {

// Puts `view` in the view group of `base`, made on base's first view.
void join_view_group(const Tensor& base, const Tensor& view) {
  AutogradMetaImpl& base_meta = ensure_meta(base);
  if (!base_meta.view_group) {
    base_meta.view_group = std::make_shared<ViewGroup>();
    base_meta.view_group->add(base.impl_ptr());
  }
  if (view.impl() == base.impl()) return;
  ensure_meta(view).view_group = base_meta.view_group;
  base_meta.view_group->add(view.impl_ptr());
}

}  // namespace

// Note [Gradient accumulation]
// The first gradient that reaches a leaf becomes its .grad(). It is stolen
// when nothing else can see it (a fresh contiguous tensor no one else
// holds) and cloned otherwise: add's backward hands the same tensor to both
// inputs, and two leaves must not share one .grad() that later accumulates
// in place. Later gradients are added in place, as torch does, so
// gradient accumulation over micro-batches allocates nothing. With
// create_graph the sum is out of place and differentiable instead.
AccumulateGrad::AccumulateGrad(Tensor leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  AutogradMetaImpl& meta = ensure_meta(leaf_);
  Tensor grad = std::move(grad_outputs[0]);
  for (const GradHook& hook : meta.grad_hooks) {
    Tensor replaced = hook.fn(grad);
    if (replaced.defined()) grad = replaced;
  }
  if (!meta.grad.defined()) {
    if (GradMode::is_enabled()) {
      meta.grad = grad;
    } else {
      bool unshared = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1;
      meta.grad = unshared && grad.is_contiguous() && !grad.impl()->autograd_meta() ? grad : grad.detach().clone();
    }
  } else if (GradMode::is_enabled()) {
    meta.grad = kiln::add(meta.grad, grad);
  } else {
    ops::add_(meta.grad, grad);
  }
  for (const auto& hook : meta.post_accumulate_hooks) hook.fn(leaf_);
  return {};
}

namespace {

// The gradient of a view, put back where the view's elements sit in its
// base: zeros of the base's shape with the view's part filled. Its own
// backward is the view again, so it is differentiable.
Tensor scatter_into_base(const Tensor& grad, const TensorGeometry& base, const ViewReplay& replay) {
  Tensor out = zeros(base.shape, {base.dtype, base.device});
  {
    NoGradGuard no_grad;
    Tensor part = replay(out);
    part.copy_(grad);
  }
  if (needs_grad({grad})) {
    // replay expects a tensor laid out as `out` is (contiguous), which the
    // gradient arriving in a double backward need not be.
    record("view_scatter", {grad}, {out},
           [replay](const TensorList& g) -> TensorList { return {replay(g[0].contiguous())}; });
  }
  return out;
}

// Whether `view` is `base` reshaped: both contiguous from the same element,
// with as many elements.
bool is_reshape(const Tensor& base, const Tensor& view) {
  return view.numel() == base.numel() && view.storage_offset() == base.storage_offset() && base.is_contiguous() &&
         view.is_contiguous();
}

class AutogradHooksImpl : public AutogradHooks {
 public:
  bool requires_grad(const Tensor& t) const override {
    AutogradMetaImpl* meta = meta_of(t);
    return meta != nullptr && (meta->requires_grad || meta->grad_fn);
  }

  void set_requires_grad(const Tensor& t, bool requires_grad) const override {
    AutogradMetaImpl* meta = meta_of(t);
    KILN_CHECK(meta == nullptr || !meta->grad_fn,
               "requires_grad_: only leaf tensors can change requires_grad; this tensor was computed by ",
               meta->grad_fn->name(), " (use detach() to get a leaf)");
    if (!requires_grad && meta == nullptr) return;
    KILN_CHECK(!requires_grad || is_floating(t.dtype()),
               "requires_grad_: only floating point tensors can require gradients, got ", t.dtype());
    ensure_meta(t).requires_grad = requires_grad;
  }

  Tensor grad(const Tensor& t) const override {
    AutogradMetaImpl* meta = meta_of(t);
    return meta ? meta->grad : Tensor();
  }

  void set_grad(const Tensor& t, const Tensor& grad) const override {
    KILN_CHECK(!grad.defined() || grad.shape() == t.shape(), "set_grad: a gradient of shape ", grad.shape(),
               " does not match the tensor's shape ", t.shape());
    KILN_CHECK(!grad.defined() || grad.device() == t.device(), "set_grad: the gradient is on ", grad.device(),
               " but the tensor is on ", t.device());
    if (!grad.defined() && meta_of(t) == nullptr) return;
    ensure_meta(t).grad = grad;
  }

  bool is_leaf(const Tensor& t) const override {
    AutogradMetaImpl* meta = meta_of(t);
    return meta == nullptr || !meta->grad_fn;
  }

  std::string grad_fn_name(const Tensor& t) const override {
    AutogradMetaImpl* meta = meta_of(t);
    return meta && meta->grad_fn ? meta->grad_fn->name() : std::string();
  }

  void backward(const Tensor& root, const Tensor& gradient, bool retain_graph, bool create_graph) const override {
    run_backward({root}, {gradient}, retain_graph, create_graph);
  }

  void retain_grad(const Tensor& t) const override {
    KILN_CHECK(requires_grad(t), "retain_grad: the tensor does not require grad");
    AutogradMetaImpl& meta = *meta_of(t);
    if (!meta.grad_fn || meta.retains_grad) return;
    meta.retains_grad = true;
    std::weak_ptr<TensorImpl> weak = t.impl_ptr();
    meta.grad_fn->grad_hooks().push_back({next_hook_handle(), meta.output_nr, [weak](const Tensor& g) {
                                            if (auto impl = weak.lock()) {
                                              auto* m = static_cast<AutogradMetaImpl*>(impl->autograd_meta().get());
                                              m->grad = m->grad.defined() ? kiln::add(m->grad, g) : g.detach().clone();
                                            }
                                            return Tensor();
                                          }});
  }

  int64_t register_hook(const Tensor& t, std::function<Tensor(const Tensor&)> hook) const override {
    KILN_CHECK(requires_grad(t), "register_hook: cannot register a hook on a tensor that does not require grad");
    AutogradMetaImpl& meta = *meta_of(t);
    int64_t handle = next_hook_handle();
    if (meta.grad_fn) {
      meta.grad_fn->grad_hooks().push_back({handle, meta.output_nr, std::move(hook)});
    } else {
      meta.grad_hooks.push_back({handle, 0, std::move(hook)});
    }
    return handle;
  }

  int64_t register_post_accumulate_grad_hook(const Tensor& t, std::function<void(const Tensor&)> hook) const override {
    KILN_CHECK(requires_grad(t) && is_leaf(t),
               "register_post_accumulate_grad_hook: only leaf tensors that require grad have their gradient "
               "accumulated");
    int64_t handle = next_hook_handle();
    meta_of(t)->post_accumulate_hooks.push_back({handle, std::move(hook)});
    return handle;
  }

  void remove_hook(const Tensor& t, int64_t handle) const override {
    AutogradMetaImpl* meta = meta_of(t);
    if (meta == nullptr) return;
    auto drop = [handle](auto& hooks) {
      hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [handle](const auto& h) { return h.handle == handle; }),
                  hooks.end());
    };
    drop(meta->grad_hooks);
    drop(meta->post_accumulate_hooks);
    if (meta->grad_fn) drop(meta->grad_fn->grad_hooks());
  }

  void record_view(std::string_view op, const Tensor& base, const Tensor& view, ViewReplay replay,
                   ViewKind kind) const override {
    if (!GradMode::is_enabled() || !requires_grad(base)) return;
    join_view_group(base, view);
    TensorGeometry geometry = TensorGeometry::of(base);
    if (kind == ViewKind::Expand) {
      record(op, {base}, {view},
             [shape = base.shape()](const TensorList& g) -> TensorList { return {sum_to(g[0], shape)}; });
      return;
    }
    if (is_reshape(base, view)) {
      // Element i of the view, in row-major order, is element i of the base:
      // the gradient is the view's gradient reshaped back, with no zeros to
      // fill and nothing to copy when it arrives contiguous (as torch's
      // ViewBackward). flatten before a classifier's linear layers is one.
      record(op, {base}, {view},
             [shape = base.shape()](const TensorList& g) -> TensorList { return {g[0].reshape(shape)}; });
      return;
    }
    std::string name(op);
    record(op, {base}, {view}, [geometry, replay = std::move(replay), name](const TensorList& g) -> TensorList {
      KILN_CHECK(replay, name,
                 ": cannot backpropagate through this view (as_strided of a non-contiguous tensor, "
                 "or with overlapping elements)");
      return {scatter_into_base(g[0], geometry, replay)};
    });
  }

  void record_copy(std::string_view op, const Tensor& input, const Tensor& output) const override {
    if (!GradMode::is_enabled() || !requires_grad(input)) return;
    record(op, {input}, {output}, [geometry = TensorGeometry::of(input)](const TensorList& g) -> TensorList {
      return {g[0].to(geometry.dtype, geometry.device)};
    });
  }

  void check_inplace(std::string_view op, const Tensor& dst, const Tensor& src) const override {
    if (!GradMode::is_enabled()) return;
    KILN_CHECK(!requires_grad(dst), op,
               ": in-place operation on a tensor that requires grad while grad mode is on; autograd cannot "
               "record it. Use the out-of-place op, or run it under NoGradGuard (as optimizer updates do)");
    KILN_CHECK(!src.defined() || !requires_grad(src), op,
               ": in-place write from a tensor that requires grad while grad mode is on; autograd cannot record "
               "it. Use the out-of-place op, or detach() the source");
  }
};

const AutogradHooksImpl g_hooks;

// Registers the implementation when libkiln loads (Note [Autograd hooks]).
struct Registration {
  Registration() { set_autograd_hooks(&g_hooks); }
} g_registration;

}  // namespace

}  // namespace kiln::autograd
