// What autograd attaches to a tensor (AutogradMeta, the slot the tensor
// layer leaves for it) and the node that accumulates into a leaf's .grad().
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "autograd/node.h"

namespace kiln::autograd {

// A base and the views recorded of it and of them, which share its memory:
// one object held by each member's metadata. A member's entry expires with
// it, and expired entries are dropped as members are added, so a parameter
// viewed every step keeps a list as long as its live views.
class ViewGroup {
 public:
  void add(const std::shared_ptr<TensorImpl>& member);
  // Whether a member other than t is still alive.
  bool has_other_than(const TensorImpl* t) const;

 private:
  mutable std::mutex mutex_;  // views of one tensor may be taken on several threads
  std::vector<std::weak_ptr<TensorImpl>> members_;
};

// Per-tensor autograd state. A leaf has no grad_fn; a tensor recorded by an
// op has grad_fn and output_nr (Note [The backward graph]).
struct AutogradMetaImpl : AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  // The tensors this one shares memory with through recorded views, when
  // there were any (Note [Recorded in-place ops] in autograd/function.h).
  std::shared_ptr<ViewGroup> view_group;
  // Made on first use and held weakly: the graph owns it, so a leaf that is
  // never used in an op costs nothing.
  std::weak_ptr<Node> grad_accumulator;
  // Leaf-only hooks, run by the AccumulateGrad node.
  std::vector<Node::GradHook> grad_hooks;
  struct PostAccumulateHook {
    int64_t handle;
    std::function<void(const Tensor&)> fn;
  };
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

// The metadata of `t`, or nullptr when autograd never touched it.
AutogradMetaImpl* meta_of(const Tensor& t);
// The metadata of `t`, created if needed.
AutogradMetaImpl& ensure_meta(const Tensor& t);

// Adds incoming gradients into a leaf's .grad(), runs the leaf's hooks, then
// its post-accumulate hooks. Note [Gradient accumulation] in variable.cpp.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  TensorList apply(TensorList&& grad_outputs) override;
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

// Where the gradient of `t` must go: its grad_fn, or the accumulator of a
// leaf that requires grad; an invalid edge when t needs no gradient.
Edge gradient_edge(const Tensor& t);

// Makes `t` output `output_nr` of `node`.
void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr);

}  // namespace kiln::autograd
