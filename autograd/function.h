// How to write a differentiable op.
//
// Note [Two levels of ops]
// Kiln has two levels of tensor functions:
// - kiln::ops:: (tensor/) compute values and nothing else. They are the
//   kernels' front-ends and know nothing of gradients.
// - kiln:: (autograd/ and nn/functional) are what users call. Each runs the
//   ops:: function and, when grad mode is on and an input requires grad,
//   records a node whose backward is written right under the forward:
//
//     Tensor mul(const Tensor& a, const Tensor& b) {
//       Tensor out = untracked([&] { return ops::mul(a, b); });
//       if (needs_grad({a, b})) {
//         record("mul", {a, b}, {out}, [a, b = SavedTensor(b), ...](const TensorList& g) -> TensorList {
//           return {sum_to(mul(g[0], b.get()), a.shape()), ...};
//         });
//       }
//       return out;
//     }
//
// Backward functions are written with kiln:: (differentiable) functions, so
// that backward(create_graph=true) records the backward itself and higher
// derivatives work. The engine runs them with grad mode off otherwise, so
// they cost nothing extra in ordinary training.
//
// The one rule, wherever the op lives (autograd/ops/ for tensor math,
// nn/functional/ for the layers' ops): a differentiable function either
// records one node, its ops:: calls inside untracked() (below), or is a
// composition of other differentiable functions and records nothing
// itself. An ops:: call outside untracked() on an input that requires grad
// records a node for each view or copy the op makes inside, which the op's
// own node then orphans: work for nothing on every call.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string_view>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace kiln::autograd {

// Gradients of the outputs in (zeros where none flowed), one gradient per
// input out (undefined where an input needs none; it may be omitted for
// inputs whose needs_input_grad is false).
using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;
// The same, also given the op's outputs (for ops whose backward uses their
// result, such as exp or softmax; Note [The backward graph] on why they are
// not simply captured).
using BackwardWithOutputsFn = std::function<TensorList(const TensorList& grad_outputs, const TensorList& outputs)>;

// True when grad mode is on and some input requires grad: only then is a
// node worth recording. Undefined tensors are ignored.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const TensorList& inputs);

// Records node `op` for outputs computed from inputs. Undefined inputs
// (an absent bias) get no gradient. Returns the node.
std::shared_ptr<Node> record(std::string_view op, const TensorList& inputs, const TensorList& outputs,
                             BackwardFn backward);
std::shared_ptr<Node> record_with_outputs(std::string_view op, const TensorList& inputs, const TensorList& outputs,
                                          BackwardWithOutputsFn backward);

// Note [Recorded in-place ops]
// Most in-place ops refuse a tensor that requires grad (autograd/ops/inplace.cpp).
// The activations LibTorch offers with inplace=true (relu_, F::leaky_relu_,
// F::elu_, F::hardtanh_, F::relu6_, F::dropout_) are recorded instead, as
// torch records them: after the write, a node whose input is x's history
// before the write (its old grad_fn) becomes x's grad_fn, so x's handle,
// and every copy of it, now stands for the written values. Their backward
// needs only the output (relu's and leaky_relu's mask is out > 0, elu's
// derivative is out + alpha where out <= 0, hardtanh's mask is the output
// strictly inside the bounds) or a mask of their own, never the
// overwritten input, and the output is saved with the version after the
// write: a later write to x makes that backward throw, and a node that saved
// x before (sigmoid saves its output) throws the same way, through the
// version counter (Note [Version counter] in tensor/tensor.h). Two cases
// are refused, naming the op:
// - a leaf that requires grad: its .grad() would belong to values that are
//   gone (torch refuses it too);
// - a tensor that shares its memory, through recorded views, with another
//   tensor still alive: its base, a view of it, or a sibling view (each
//   tensor's metadata holds its ViewGroup, autograd/variable.h). Kiln's
//   views record a node from the base to the view and nothing more, so a
//   write through one could not reach the other's history (torch rebases
//   the base with CopySlices and regenerates the views' grad_fn). A view
//   whose base is gone is fine: conv1d's output is a squeeze of a
//   temporary. The out-of-place op is always right there.
// With grad mode off, or on a tensor that does not require grad, they are
// plain writes.
//
// Whether the in-place `op` about to write x is to be recorded: grad mode
// is on and x requires grad. Throws for the refused cases above.
bool records_inplace(std::string_view op, const Tensor& x);

// Runs `forward`, a tensor-layer (ops::) call, with grad mode off, and
// returns its result. ops:: functions make views and copies of their inputs
// internally; with grad mode on, each would be recorded as a node that the
// op's own node then replaces, and a copy_ from an input that requires grad
// is refused outright (ops::cat and ops::linear copy inputs into their
// result). PyTorch's autograd wrappers exclude the kernels below them the
// same way.
//   Tensor out = untracked([&] { return ops::cat(tensors, dim); });
template <class F>
auto untracked(F&& forward) {
  NoGradGuard no_grad;
  return forward();
}

// Sums `grad` over the dims that broadcasting added or expanded so that it
// has `shape` (the backward of broadcasting). Differentiable.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// "max_pool2d" -> "MaxPool2dBackward", the grad_fn name shown to users.
std::string backward_name(std::string_view op);

}  // namespace kiln::autograd
