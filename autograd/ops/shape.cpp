// Differentiable joining and splitting. The backward of joining is slicing
// the gradient (views of it, no copies); the backward of splitting is
// joining the gradients. split and chunk return views and record one node
// with an output per piece, so backward runs once however many pieces are
// used; the engine hands it zeros for the pieces no gradient reached.
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::TensorList;
using autograd::untracked;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = untracked([&] { return ops::cat(tensors, dim); });
  if (!autograd::needs_grad(tensors)) return out;
  // ops::cat skips 1-d empty tensors (they get no gradient) and takes the
  // rank, and so the wrapped dim, from the first tensor it does not skip.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  int64_t d = 0;
  for (const Tensor& t : tensors) {
    if (!skipped(t)) {
      d = wrap_dim(dim, t.dim(), "cat");
      break;
    }
  }
  std::vector<int64_t> sizes;  // each tensor's extent along d, -1 if skipped
  sizes.reserve(tensors.size());
  for (const Tensor& t : tensors) sizes.push_back(skipped(t) ? -1 : t.size(d));
  record("cat", tensors, {out}, [d, sizes](const TensorList& g) -> TensorList {
    TensorList grads(sizes.size());
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] < 0) continue;
      grads[i] = g[0].narrow(d, offset, sizes[i]);
      offset += sizes[i];
    }
    return grads;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = untracked([&] { return ops::stack(tensors, dim); });
  if (autograd::needs_grad(tensors)) {
    int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
    record("stack", tensors, {out}, [d, count = tensors.size()](const TensorList& g) -> TensorList {
      TensorList grads;
      grads.reserve(count);
      for (size_t i = 0; i < count; ++i) grads.push_back(g[0].select(d, static_cast<int64_t>(i)));
      return grads;
    });
  }
  return out;
}

namespace {

// Records the pieces of x along dim as the outputs of one node.
std::vector<Tensor> record_pieces(std::string_view op, const Tensor& x, std::vector<Tensor> pieces, int64_t dim) {
  if (autograd::needs_grad({x})) {
    int64_t d = wrap_dim(dim, x.dim(), op);
    record(op, {x}, pieces, [d](const TensorList& g) -> TensorList { return {cat(g, d)}; });
  }
  return pieces;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  return record_pieces("split", x, untracked([&] { return ops::split(x, split_size, dim); }), dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return record_pieces("split", x, untracked([&] { return ops::split(x, sizes, dim); }), dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  return record_pieces("chunk", x, untracked([&] { return ops::chunk(x, chunks, dim); }), dim);
}

}  // namespace kiln
