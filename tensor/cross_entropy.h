// Cross entropy with class-index targets, row by row, in one kernel pass
// forward and one backward: the loss of every classification training step.
//
// Note [Fused cross entropy]
// Written as tensor ops, cross_entropy (nn/functional/cross_entropy.cpp)
// masks the ignored targets (ne, where), checks their range, takes
// log_softmax, gathers the target's column, negates and weights it, and its
// backward builds softmax - onehot from another four ops: about twenty
// kernels per step, each tiny. On a GPU each is a launch costing more than
// its arithmetic: a LeNet training step made 53 backend calls (each at
// least one launch on a GPU), 20 of them for its loss; with the fused
// passes the loss makes 5 and the step 38 (counted on the CPU backend at
// batch 64). Here one pass per row computes, for row n of x (M, C) with
// target t, class weights w (ones when undefined), smoothing s and
// logp = log_softmax(x_n):
//   losses[n]         = (1 - s) * w_t * (-logp_t) + s/C * sum_c w_c * (-logp_c)
//   target_weights[n] = w_t
// both 0 where t == ignore_index; and the backward pass writes
//   grad[n, j] = u_n * (p_j * a_n - (1 - s) * w_t * [j == t] - s/C * w_j),
//   a_n = (1 - s) * w_t + s/C * sum_c w_c,
// with p = softmax(x_n) and u_n the gradient reaching row n's loss
// (grad_out[n], or the scalar grad_out, divided by `denominator` for a mean),
// 0 on ignored rows (so a mean over no kept target, whose loss is NaN, has a
// zero gradient, as torch's). Sums are taken in the compute type (float for float32
// and 16-bit, double for float64), the softmax's sum of exponentials in
// float64 on the CPU as tensor/cpu/softmax.cpp's.
#pragma once

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln::ops {

struct CrossEntropyRows {
  Tensor losses;          // (M), x's dtype
  Tensor target_weights;  // (M), x's dtype: w_t, 0 on ignored rows
  Tensor stacked;         // (2, M): losses and target_weights are its rows, so
                          // one sum over dim 1 gives both totals of a mean
};

// x: (M, C) floating; target: (M) Int64 on x's device; weight: (C) of x's
// dtype and device, or undefined. A target outside [0, C) other than
// ignore_index is a kiln::Error worded by `message` (on a GPU, at the host's
// next wait: Note [CUDA kernel errors]); its row's loss is then garbage.
//   CrossEntropyRows rows = ops::cross_entropy_rows(logits, labels, Tensor(), -100, 0.0, message);
CrossEntropyRows cross_entropy_rows(const Tensor& x, const Tensor& target, const Tensor& weight,
                                    int64_t ignore_index, double smoothing, const IndexErrorMessage& message);

// The gradient (M, C) of sum_n u_n * losses[n] with respect to x, where u_n
// is grad_out[n] (grad_out (M)) or grad_out itself (0-dim), divided by the
// 0-dim `denominator` when it is defined (a mean's total weight).
Tensor cross_entropy_rows_backward(const Tensor& grad_out, const Tensor& denominator, const Tensor& x,
                                   const Tensor& target, const Tensor& weight, int64_t ignore_index,
                                   double smoothing);

}  // namespace kiln::ops
