// The backward graph: nodes (one per recorded op) joined by edges.
//
// Note [The backward graph]
// Every differentiable op that runs while grad mode is on and some input
// requires grad creates a Node. The op's outputs point at the node (their
// grad_fn, with the output's index, output_nr); the node points at where the
// gradient of each input must go (its next_edges): the grad_fn of that input,
// or for a leaf its AccumulateGrad node, which adds into leaf.grad(). So
// the graph hangs off the outputs: when the last output (and every node
// downstream) is dropped, the whole graph is freed by reference counting.
// Edges are strong pointers from later nodes to earlier ones only, so there
// are no cycles; the one place a cycle could form, an op saving its own
// output, is handled by LambdaNode (it keeps outputs without their history
// and re-attaches itself when backward asks for them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace kiln::autograd {

using TensorList = std::vector<Tensor>;

class Node;

// Where a gradient goes: input `input_nr` of `node`. An edge with no node
// means "this input needs no gradient".
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// Shape, dtype and device of one tensor flowing through a node, kept so the
// engine can check and materialise gradients without the tensor itself.
struct TensorGeometry {
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
  static TensorGeometry of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(std::string name);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  // Creation order; the engine runs later nodes first among those ready.
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Gradients of this node's outputs in (one per output, zeros where no
  // gradient flowed), gradients of its inputs out (one per next edge,
  // undefined where the input needs none).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Frees what was saved for backward; called after a backward that did not
  // ask to retain the graph. apply() after release() throws.
  virtual void release() {}

  std::vector<Edge>& next_edges() { return next_edges_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  // One per input (parallel to next_edges) and one per output.
  std::vector<TensorGeometry>& inputs() { return inputs_; }
  std::vector<TensorGeometry>& outputs() { return outputs_; }

  // Hooks on the gradient of output `output_nr` (Tensor::register_hook on a
  // non-leaf); they run before apply() and may replace the gradient.
  struct GradHook {
    int64_t handle;
    uint32_t output_nr;
    std::function<Tensor(const Tensor&)> fn;
  };
  std::vector<GradHook>& grad_hooks() { return grad_hooks_; }

 private:
  std::string name_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
  std::vector<TensorGeometry> inputs_;
  std::vector<TensorGeometry> outputs_;
  std::vector<GradHook> grad_hooks_;
};

// A tensor kept for backward, with the version it had when saved: reading it
// after an in-place write to it or to any of its views throws, naming the op
// whose backward needed it (Note [Version counter] in tensor/tensor.h).
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : tensor_(t), version_(t.defined() ? t.version() : 0) {}
  // The saved tensor; throws if it was modified in place since it was saved.
  const Tensor& get() const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

// The name of the node whose backward is running on this thread ("" if none),
// for error messages.
const std::string& current_node_name();

// A fresh handle for a hook registration.
int64_t next_hook_handle();

}  // namespace kiln::autograd
