// The Tensor methods about gradients forward to the registered autograd
// implementation (Note [Autograd hooks]).
#include "tensor/autograd_hooks.h"

#include <atomic>

#include "tensor/tensor.h"

namespace kiln {

namespace {
std::atomic<const AutogradHooks*> g_hooks{nullptr};
}  // namespace

void set_autograd_hooks(const AutogradHooks* hooks) { g_hooks.store(hooks); }

const AutogradHooks& autograd_hooks() {
  const AutogradHooks* hooks = g_hooks.load();
  KILN_CHECK(hooks != nullptr, "autograd: no autograd implementation is registered (is autograd/ linked?)");
  return *hooks;
}

// A tensor without AutogradMeta has never been touched by autograd, so the
// cheap questions are answered here without a virtual call.
bool Tensor::requires_grad() const { return impl()->autograd_meta() && autograd_hooks().requires_grad(*this); }

Tensor& Tensor::requires_grad_(bool requires_grad) {
  autograd_hooks().set_requires_grad(*this, requires_grad);
  return *this;
}

Tensor Tensor::grad() const { return impl()->autograd_meta() ? autograd_hooks().grad(*this) : Tensor(); }

void Tensor::set_grad(const Tensor& grad) const { autograd_hooks().set_grad(*this, grad); }

bool Tensor::is_leaf() const { return !impl()->autograd_meta() || autograd_hooks().is_leaf(*this); }

std::string Tensor::grad_fn_name() const {
  return impl()->autograd_meta() ? autograd_hooks().grad_fn_name(*this) : std::string();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd_hooks().backward(*this, gradient, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  KILN_CHECK(defined(), "detach: the tensor is undefined");
  // Shares the version counter as torch's detach() does: an in-place write
  // through the detached alias changes what autograd saved of the original.
  auto alias = std::make_shared<TensorImpl>(storage(), dtype(), shape(), strides(), storage_offset(),
                                            impl()->version_counter());
  alias->set_quant_params(impl()->quant_params());
  return Tensor(std::move(alias));
}

void Tensor::retain_grad() const { autograd_hooks().retain_grad(*this); }

int64_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  return autograd_hooks().register_hook(*this, std::move(hook));
}

int64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  return autograd_hooks().register_post_accumulate_grad_hook(*this, std::move(hook));
}

void Tensor::remove_hook(int64_t handle) const { autograd_hooks().remove_hook(*this, handle); }

}  // namespace kiln
