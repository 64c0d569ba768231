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

}  // namespace kiln::autograd
