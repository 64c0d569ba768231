// Collectives as differentiable functions, as torch.distributed.nn.functional
// and Megatron's conjugate operators: out of place, each returns a new tensor
// that autograd can differentiate through.
//
//   namespace DF = kiln::distributed::functional;
//   Tensor h = DF::all_gather(x_shard, /*dim=*/1);       // (N, W*K): every rank's columns
//   Tensor y = DF::reduce_scatter(h, /*dim=*/0);         // (N/W, W*K): this rank's rows, summed
//   kiln::sum(y).backward();                              // gradients cross ranks the other way
//
// `group` null means the default group (init_process_group). Every function
// blocks until its data is in place. Every rank of the group must call the
// same functions in the same order, and later run the same backward.
//
// Note [Differentiable collectives]
// What is differentiated. Each rank r computes its loss L_r from the
// collective's output on r. The objective is their sum, L = sum_r L_r, and
// backward leaves on every rank dL/dx_r, the gradient of the *whole group's*
// loss with respect to this rank's input. (A rank's gradient is therefore not
// that of its own L_r alone: part of it arrives from the other ranks during
// backward.) This is torch.distributed.nn.functional's convention. Megatron's
// tensor-parallel operators differ in one respect: there every rank computes
// the same replicated loss, and counting it once instead of W times makes
// all-reduce's backward the identity (its "g" operator) and the identity's
// backward an all-reduce ("f"). With a sum of per-rank losses, every
// collective's backward is its adjoint, another collective:
//
//   forward                        backward (of the gradient g)
//   all_reduce(x) = sum_s x_s      all_reduce(g): every output depends on every input
//   all_gather(x, dim)             reduce_scatter(g, dim): rank s's block of every rank's
//                                  g, summed, is the gradient of x_s
//   reduce_scatter(x, dim)         all_gather(g, dim): block r of x_s reached rank r only
//   broadcast(x, src)              reduce(g, src): x_src reached every rank; the other
//                                  ranks' x reached none, their gradient is zero
//   reduce(x, dst)                 broadcast(g, dst): the sum reached dst only (the
//                                  other ranks' outputs are zeros)
//   all_to_all(x, split, concat)   all_to_all(g, concat, split): the blocks go back
//   send(x, dst) / recv(src)       the gradient of what dst received is sent back
//
// Avg is Sum scaled by 1/W, and its backward is the same collective scaled
// the same way. Max, Min and Product have no gradient here: they raise a
// kiln::Error when an input requires grad.
//
// Backwards are written with these same functions, so backward with
// create_graph records them, and second derivatives cross the ranks too
// (all_gather's backward's backward is all_gather). send and recv are the
// exception: their backward's communication is not recorded, so their
// gradients are first-order only.
//
// When a node is recorded. A backward that communicates is itself a
// collective: it runs only if every rank runs it. Whether a rank records the
// node therefore cannot depend on that rank's own inputs, as it would for
// an ordinary op: rank 1 broadcasting into a buffer that does not require
// grad must still send its gradient to rank 0, whose parameter does. So a
// node is recorded whenever grad mode is on and the tensor is floating point,
// the same decision on every rank; the output then requires grad even where
// the input does not (whose gradient is computed, sent on, and dropped here).
// It follows that every rank must backpropagate through the same
// collectives in the same order: a rank whose loss does not reach a
// collective's output leaves the others waiting until the group's timeout
// names it. autograd::grad runs only the nodes that lead to the inputs asked
// for; ask on every rank for inputs the collectives lead to (and use
// backward() where a recv's gradient must be sent, since a recv has no
// inputs to lead to). Run evaluation under NoGradGuard: nothing is recorded.
//
// send and recv. A recv's output is where the graph of the receiving rank
// begins, and its node's backward sends the output's gradient back to the
// source. A send has no output that the sending rank uses, so it returns a
// token: a zero scalar whose node's backward receives the gradient of x from
// dst and passes it on into x's graph. The sender backpropagates from the
// token (token.backward(), or the token added to its own loss, which its
// value 0 leaves unchanged); the gradient the token itself receives is
// ignored. In a pipeline:
//
//   // rank 0                                  // rank 1
//   Tensor h = stage0(x);                      Tensor h = DF::recv(shape, kFloat32, 0);
//   Tensor token = DF::send(h, 1);             Tensor loss = criterion(stage1(h), y);
//   token.backward();   // waits for rank 1    loss.backward();   // sends dL/dh to rank 0
//
// The gradient goes back with the send's tag, in the other direction; pairs
// of ranks that also send each other data the other way in forward should
// give it another tag. Several sends to one rank with one tag are received
// in order, so their tokens must be backpropagated in the order in which the
// receiver's backward sends their gradients.
#pragma once

#include <cstdint>

#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace kiln::distributed::functional {

// sum_s x_s (or the mean for Avg) over the ranks of `group`, on every rank.
// x: any shape, the same on every rank. Backward: all_reduce of the gradient.
Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);

// Every rank's x concatenated along `dim` in rank order: for x of (N, K) and
// dim 0, (W*N, K). x: the same shape on every rank, at least 1-d.
// Backward: reduce_scatter of the gradient along `dim`.
Tensor all_gather(const Tensor& x, int64_t dim = 0, ProcessGroup* group = nullptr);

// Block `rank` of sum_s x_s, the blocks being x split into W equal parts
// along `dim`: for x of (W*N, K) and dim 0, (N, K). x.size(dim) must be a
// multiple of W. Backward: all_gather of the gradient along `dim`.
Tensor reduce_scatter(const Tensor& x, int64_t dim = 0, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);

// A copy of rank src's x, on every rank (the others' x give the shape and
// dtype only). Backward: reduce of the gradient to src.
Tensor broadcast(const Tensor& x, int src, ProcessGroup* group = nullptr);

// sum_s x_s (or the mean for Avg) on rank dst, zeros of x's shape elsewhere.
// Backward: broadcast of dst's gradient.
Tensor reduce(const Tensor& x, int dst, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);

// x is split into W equal blocks along split_dim; block s goes to rank s, and
// the blocks received from ranks 0..W-1 are concatenated along concat_dim.
// For x of (W*N, K), split_dim 0 and concat_dim 1: (N, W*K), so that a
// tensor split across ranks by columns becomes one split by rows (as
// Ulysses-style attention trades a sequence split for a head split).
// x.size(split_dim) must be a multiple of W. Backward: all_to_all(g, concat_dim, split_dim).
Tensor all_to_all(const Tensor& x, int64_t split_dim, int64_t concat_dim, ProcessGroup* group = nullptr);

// Sends x to rank dst, returning the token described in the Note: a zero
// scalar of x's dtype whose backward receives x's gradient from dst. The
// token requires grad when grad mode is on and x is floating point.
Tensor send(const Tensor& x, int dst, ProcessGroup* group = nullptr, int tag = 0);

// Receives a tensor of `shape` and `options` from rank src. When grad mode is
// on and the dtype is floating point it requires grad, and backward sends its
// gradient to src (whose send's token receives it).
Tensor recv(const Shape& shape, TensorOptions options, int src, ProcessGroup* group = nullptr, int tag = 0);

}  // namespace kiln::distributed::functional
