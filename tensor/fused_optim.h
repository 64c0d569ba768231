// Fused optimizer updates: one kernel pass over each parameter instead of
// one op (and often one temporary) per term of the update.
//
// Note [Fused optimizer steps]
// optim::SGD written as tensor ops runs, per parameter, mul_, then add_ with
// alpha (alpha * x into a temporary, then the sum) for the dampened
// gradient, the weight decay and the final update: about seven kernels and
// three temporaries for each of LeNet's ten parameters, 0.2 ms of a 7 ms
// training step on one core, spent almost entirely in per-op overhead. The
// fused kernel reads each element once and performs the same float
// operations in the same order, each rounded to the parameter's dtype, so
// its results are bitwise those of the unfused ops (tests/optim checks it
// for every option). The per-element recipes are the optimizers' own
// (optim/sgd.h, optim/adam.h). The CUDA backend implements the same contract
// and, as PyTorch's multi_tensor_apply, updates all parameters in one or a
// few kernel launches (tensor/cuda/optim_step.cu).
#pragma once

#include <vector>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::ops {

using kiln::AdamStep;  // the steps' scalars (tensor/backend.h)
using kiln::SgdStep;

// Whether sgd_step_ takes these tensors: params[i], grads[i] and (with
// momentum) momentum_buffers[i] contiguous, of one shape, one float32 or
// float64 dtype and one device each, all on params[0]'s device (one launch
// serves one device), on a device whose backend fuses.
bool sgd_step_fusable(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                      const std::vector<Tensor>& momentum_buffers);

// For each i, in place: the update of optim/sgd.h applied to params[i] with
// gradient grads[i] and, when step.momentum != 0, buffer momentum_buffers[i],
// which is overwritten with the gradient direction (its first step) where
// first_step[i] is true. Throws kiln::Error naming sgd_step_ when
// sgd_step_fusable is false or the lists' lengths differ.
void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_step, const SgdStep& step);

// Whether adam_step_ takes these tensors: as sgd_step_fusable, for
// exp_avgs, exp_avg_sqs and (with amsgrad, else empty) max_exp_avg_sqs.
bool adam_step_fusable(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<Tensor>& max_exp_avg_sqs);

// For each i, in place: the Adam (step.decoupled: AdamW) update of
// optim/adam.h applied to params[i] and its state, with steps[i] the
// parameter's step count t including this step (>= 1). Throws kiln::Error
// naming adam_step_ when adam_step_fusable is false or the lists' lengths
// differ.
//   ops::adam_step_({w}, {w.grad()}, {m}, {v}, {}, {1.0}, {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999});
void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& steps, const AdamStep& step);

// Whether unscale_grads_ takes these gradients: each defined, contiguous,
// float32 or float64, all on grads[0]'s device (CPU or CUDA).
bool unscale_grads_fusable(const std::vector<Tensor>& grads);

// The unscale of optim::GradScaler (Note [Dynamic loss scaling]), as torch's
// _amp_foreach_non_finite_check_and_unscale_: for each i, in place,
// grads[i] = grads[i] * inv_scale (inv_scale rounded to the gradient's dtype,
// as mul_ rounds its scalar), and found_inf, a float32 scalar on the
// gradients' device, set to 1 when any product is infinite or NaN (else left
// as it is). One pass over the gradients; on CUDA one launch for up to 32
// gradients of a dtype, where the unfused check took three ops per gradient.
// Throws kiln::Error naming unscale_grads_ when unscale_grads_fusable is
// false or found_inf is not such a scalar.
//   Tensor found = zeros({}, {DType::Float32, device});
//   ops::unscale_grads_(grads, 1.0 / 65536, found);  // found.item<float>() == 1: skip the step
void unscale_grads_(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found_inf);

}  // namespace kiln::ops
