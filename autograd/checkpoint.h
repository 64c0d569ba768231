// Activation checkpointing, as torch.utils.checkpoint (the reentrant
// variant): trade compute for memory.
//
//   TensorList out = checkpoint([&](const TensorList& in) { return TensorList{block(in[0])}; }, {x});
//
// The forward of `fn` runs without recording a graph, so none of its
// intermediate activations are kept; only `inputs` are. Backward runs `fn`
// again with recording on and backpropagates through that fresh graph.
// Parameters used inside `fn` get their gradients during that second pass.
// The default generator's state is restored before the recomputation, so
// dropout draws the same mask both times. `fn` must be deterministic
// otherwise and must not modify its inputs in place.
#pragma once

#include <functional>

#include "autograd/node.h"

namespace kiln::autograd {

TensorList checkpoint(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs);

}  // namespace kiln::autograd
