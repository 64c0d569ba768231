#include "autograd/function.h"

#include <cctype>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/variable.h"

namespace kiln::autograd {

namespace {

// A node whose backward is a function written next to the op's forward.
// When the op asked to keep its outputs, they are stored without history
// (a saved output holding its own grad_fn would be a reference cycle) and
// handed to the backward re-attached to this node, so a backward that uses
// them is still differentiable.
class LambdaNode : public Node {
 public:
  LambdaNode(std::string name, BackwardFn fn) : Node(std::move(name)), fn_(std::move(fn)) {}
  LambdaNode(std::string name, BackwardWithOutputsFn fn) : Node(std::move(name)), fn_with_outputs_(std::move(fn)) {}

  void keep_outputs(const TensorList& outputs) {
    for (const Tensor& out : outputs) saved_outputs_.emplace_back(out.detach());
  }

  TensorList apply(TensorList&& grad_outputs) override {
    KILN_CHECK(fn_ || fn_with_outputs_, name(),
               ": trying to backward through the graph a second time (or to use saved tensors after they were "
               "freed); pass retain_graph=true to the first backward if you need to backward twice");
    if (fn_) return fn_(grad_outputs);
    TensorList outputs;
    outputs.reserve(saved_outputs_.size());
    for (uint32_t i = 0; i < saved_outputs_.size(); ++i) {
      Tensor out = saved_outputs_[i].get().detach();
      if (GradMode::is_enabled()) set_history(out, shared_from_this(), i);
      outputs.push_back(std::move(out));
    }
    return fn_with_outputs_(grad_outputs, outputs);
  }

  void release() override {
    fn_ = nullptr;
    fn_with_outputs_ = nullptr;
    saved_outputs_.clear();
  }

 private:
  BackwardFn fn_;
  BackwardWithOutputsFn fn_with_outputs_;
  std::vector<SavedTensor> saved_outputs_;
};

void connect(Node& node, const TensorList& inputs, const TensorList& outputs) {
  node.next_edges().reserve(inputs.size());
  node.inputs().reserve(inputs.size());
  for (const Tensor& in : inputs) {
    node.next_edges().push_back(in.defined() ? gradient_edge(in) : Edge{});
    node.inputs().push_back(in.defined() ? TensorGeometry::of(in) : TensorGeometry{});
  }
  for (const Tensor& out : outputs) node.outputs().push_back(TensorGeometry::of(out));
}

}  // namespace

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

bool needs_grad(const TensorList& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

bool records_inplace(std::string_view op, const Tensor& x) {
  if (!GradMode::is_enabled() || !x.requires_grad()) return false;
  const AutogradMetaImpl* meta = meta_of(x);
  KILN_CHECK(meta->grad_fn, op,
             ": a leaf tensor that requires grad is being used in an in-place operation; use the out-of-place op, "
             "or run it under NoGradGuard");
  KILN_CHECK(!meta->view_group || !meta->view_group->has_other_than(x.impl()), op,
             ": in-place operation on a tensor that requires grad and shares its memory with another through a view; "
             "autograd cannot record it (Note [Recorded in-place ops]). Use the out-of-place op");
  return true;
}

std::shared_ptr<Node> record(std::string_view op, const TensorList& inputs, const TensorList& outputs,
                             BackwardFn backward) {
  auto node = std::make_shared<LambdaNode>(backward_name(op), std::move(backward));
  connect(*node, inputs, outputs);
  for (uint32_t i = 0; i < outputs.size(); ++i) set_history(outputs[i], node, i);
  return node;
}

std::shared_ptr<Node> record_with_outputs(std::string_view op, const TensorList& inputs, const TensorList& outputs,
                                          BackwardWithOutputsFn backward) {
  auto node = std::make_shared<LambdaNode>(backward_name(op), std::move(backward));
  connect(*node, inputs, outputs);
  node->keep_outputs(outputs);
  for (uint32_t i = 0; i < outputs.size(); ++i) set_history(outputs[i], node, i);
  return node;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  // Broadcasting adds dims on the left and stretches size-1 dims: sum the
  // added dims away, then the stretched ones with keepdim.
  int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  KILN_CHECK(lead >= 0, "sum_to: cannot reduce a gradient of shape ", grad.shape(), " to ", shape);
  Shape dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t g = grad.shape()[lead + i];
    if (shape[i] == 1 && g != 1) {
      dims.push_back(lead + static_cast<int64_t>(i));
    } else {
      KILN_CHECK(shape[i] == g, "sum_to: cannot reduce a gradient of shape ", grad.shape(), " to ", shape);
    }
  }
  Tensor summed = dims.empty() ? grad : kiln::sum(grad, dims, /*keepdim=*/true);
  return lead > 0 || summed.shape() != shape ? summed.reshape(shape) : summed;
}

std::string backward_name(std::string_view op) {
  std::string name;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return name + "Backward";
}

}  // namespace kiln::autograd
