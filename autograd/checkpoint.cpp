#include "autograd/checkpoint.h"

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "tensor/random.h"

namespace kiln::autograd {

TensorList checkpoint(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs) {
  Generator& gen = default_generator();
  uint64_t seed = gen.seed(), offset = gen.offset();
  TensorList outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  // An output that is an input would have its history overwritten below.
  for (Tensor& out : outputs) {
    for (const Tensor& in : inputs) {
      if (out.defined() && in.defined() && out.is_same(in)) out = out.detach();
    }
  }
  if (!needs_grad(inputs)) {
    // Parameters inside fn may still require grad; torch's reentrant
    // checkpoint has the same limit and warns. Kiln refuses rather than
    // silently dropping those gradients.
    KILN_CHECK(!GradMode::is_enabled(),
               "checkpoint: no input needs_input grad, so backward would never reach the "
               "parameters inside the checkpointed function; make an input require grad or call it without "
               "checkpointing");
    return outputs;
  }
  // The outputs are fresh tensors with no history; the node below makes them
  // results of the checkpoint.
  TensorList saved_inputs;
  for (const Tensor& in : inputs) saved_inputs.push_back(in.defined() ? in.detach() : Tensor());
  std::vector<uint64_t> versions;
  for (const Tensor& in : inputs) versions.push_back(in.defined() ? in.version() : 0);
  std::vector<bool> needs_input;
  for (const Tensor& in : inputs) needs_input.push_back(in.defined() && in.requires_grad());

  record("checkpoint", inputs, outputs,
         [fn, saved_inputs, versions, needs_input, seed, offset](const TensorList& grads) -> TensorList {
           for (size_t i = 0; i < saved_inputs.size(); ++i) {
             KILN_CHECK(!saved_inputs[i].defined() || saved_inputs[i].version() == versions[i], "checkpoint: input ", i,
                        " was modified in place after the forward pass");
           }
           // Recompute with recording on, from leaves standing in for the inputs.
           TensorList leaves;
           for (size_t i = 0; i < saved_inputs.size(); ++i) {
             Tensor leaf = saved_inputs[i].defined() ? saved_inputs[i].detach() : Tensor();
             if (needs_input[i]) leaf.requires_grad_(true);
             leaves.push_back(leaf);
           }
           Generator& g = default_generator();
           uint64_t now_seed = g.seed(), now_offset = g.offset();
           g.set_state(seed, offset);
           TensorList recomputed;
           {
             EnableGradGuard enable;
             recomputed = fn(leaves);
           }
           g.set_state(now_seed, now_offset);
           TensorList roots, root_grads;
           for (size_t i = 0; i < recomputed.size(); ++i) {
             if (recomputed[i].defined() && recomputed[i].requires_grad()) {
               roots.push_back(recomputed[i]);
               root_grads.push_back(grads[i]);
             }
           }
           if (!roots.empty()) run_backward(roots, root_grads, false, GradMode::is_enabled());
           TensorList input_grads;
           for (const Tensor& leaf : leaves) input_grads.push_back(leaf.defined() ? leaf.grad() : Tensor());
           return input_grads;
         });
  return outputs;
}

}  // namespace kiln::autograd
