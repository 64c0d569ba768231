// The backward engine: runs the graph from the outputs back to the leaves.
//
// Note [Backward execution order]
// A node may run only when every node that feeds it a gradient has run, so
// the engine first counts, for each node reachable from the roots, how many
// reachable nodes point at it. Ready nodes (count 0) run in decreasing
// creation order (sequence_nr), which is the reverse of the forward pass
// for a sequential model: the last layer's parameters get their gradients
// first. An AccumulateGrad node is ready as soon as the last use of its leaf
// has been differentiated, so a leaf's post-accumulate hooks fire while the
// rest of backward is still running. That is what lets distributed data
// parallel start all-reducing the last layers' gradients while the earlier
// layers are still being differentiated.
#pragma once

#include <functional>

#include "autograd/node.h"

namespace kiln::autograd {

// Backpropagates from `roots`, accumulating into the .grad() of every leaf
// that requires grad. `grad_roots[i]` may be undefined when roots[i] has one
// element (it is then 1). Frees the graph unless retain_graph; with
// create_graph the backward itself is recorded (for higher derivatives).
void run_backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph, bool create_graph);

// Runs `callback` once the backward pass running on this thread has
// finished, before backward() returns (PyTorch's queue_callback).
// DistributedDataParallel uses it to wait for its last gradient buckets, so
// that backward() returns with every gradient averaged. Must be called from
// inside a backward (a hook); callbacks run in the order queued, and not at
// all if the backward throws.
void queue_callback(std::function<void()> callback);

// The gradients of `outputs` with respect to `inputs`, returned instead of
// accumulated into .grad(), as torch.autograd.grad. An input that the
// outputs do not depend on gets an undefined tensor when allow_unused, else
// an error. retain_graph defaults to create_graph, as in torch.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool create_graph = false, bool allow_unused = false);

namespace detail {
class GraphTask;  // engine.cpp: one backward call
}  // namespace detail

// Note [Split backward]
// Zero-bubble pipeline schedules split a stage's backward in two: I, the
// gradient of the stage's inputs, which the previous stage waits for, and
// W, the gradient of its parameters, which nobody waits for and can run
// later, in time the rank would spend idle. backward_input() is I: it runs
// the nodes on the paths from the outputs to `inputs` only and, inside each,
// asks only for the gradients those paths need: input_gradient_wanted(i)
// is false for a node input that leads only elsewhere (to a weight), and
// the heavy ops (linear, mm, matmul, conv2d) then skip it, which is where
// the weight-gradient GEMMs go. What I leaves undone is kept in a
// DeferredBackward: each such node with the gradients its outputs
// received, and the gradients already computed towards other inputs
// (by ops that compute every gradient at once). backward_weight() is W: it
// asks those nodes for the skipped gradients and backpropagates everything
// kept into the leaves, accumulating their .grad() (and running their hooks)
// as backward() would. I + W compute what one backward computes: nothing
// twice. The graph stays alive between them (the DeferredBackward holds the
// nodes); W frees what it runs.
class DeferredBackward {
 public:
  DeferredBackward() = default;
  bool empty() const { return edges_.empty() && replays_.empty(); }

 private:
  friend TensorList backward_input(const TensorList&, const TensorList&, const TensorList&, DeferredBackward&);
  friend void backward_weight(DeferredBackward&&);
  friend class detail::GraphTask;
  struct Replay {
    std::shared_ptr<Node> node;
    TensorList grad_outputs;  // what the node received in I, after its hooks
    std::vector<bool> wanted; // the inputs whose gradients W asks for
  };
  std::vector<Edge> edges_;  // gradients computed in I towards inputs I did not need
  TensorList grads_;
  std::vector<Replay> replays_;
};

// I: the gradients of `inputs` (each must require grad; an input the outputs
// do not reach gets an undefined tensor), with `grad_outputs` as in grad().
// Fills `rest` with what W must still do; keeps the graph.
TensorList backward_input(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                          DeferredBackward& rest);
// W: the rest of the backward that backward_input() left in `rest`.
void backward_weight(DeferredBackward&& rest);

// Inside a node's backward function: whether the engine wants the gradient
// of the node's input `i` now. Always true except during backward_input,
// for inputs that lead only to what W computes (Note [Split backward]).
bool input_gradient_wanted(size_t i);

}  // namespace kiln::autograd
