// Differentiable tril, triu, masked_fill, topk and sort (tensor/select.h).
// Each backward is the forward's own kind of selection applied to the
// gradient, written with these same functions, so second derivatives come
// for free: a triangle's gradient is the triangle of the gradient,
// masked_fill's is the gradient with the filled entries zeroed, and topk's
// and sort's values send their gradient back to the indices they came from.
// multinomial and the indices are integers and carry none.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "tensor/autograd_hooks.h"

namespace kiln {

using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;
using autograd::untracked;

Tensor tril(const Tensor& x, int64_t diagonal) {
  Tensor out = untracked([&] { return ops::tril(x, diagonal); });
  if (autograd::needs_grad({x})) {
    record("tril", {x}, {out}, [diagonal](const TensorList& g) -> TensorList { return {tril(g[0], diagonal)}; });
  }
  return out;
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  Tensor out = untracked([&] { return ops::triu(x, diagonal); });
  if (autograd::needs_grad({x})) {
    record("triu", {x}, {out}, [diagonal](const TensorList& g) -> TensorList { return {triu(g[0], diagonal)}; });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  Tensor out = untracked([&] { return ops::masked_fill(x, mask, value); });
  if (autograd::needs_grad({x})) {
    record("masked_fill", {x}, {out},
           [saved_mask = SavedTensor(mask), shape = x.shape()](const TensorList& g) -> TensorList {
             // g has the broadcast shape of x and mask: summed back to x's.
             return {autograd::sum_to(masked_fill(g[0], saved_mask.get(), 0), shape)};
           });
  }
  return out;
}

Tensor& masked_fill_(Tensor& x, const Tensor& mask, Scalar value) {
  // As every in-place op here: not recorded, refused on a tensor that
  // requires grad while grad mode is on (autograd/ops/inplace.cpp).
  if (x.impl()->autograd_meta()) autograd_hooks().check_inplace("masked_fill_", x, Tensor());
  return ops::masked_fill_(x, mask, value);
}

TopK topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  TopK out = untracked([&] { return ops::topk(x, k, dim, largest, sorted); });
  if (autograd::needs_grad({x})) {
    // A 0-dim x has one entry, at dim 0 of its one-element view.
    const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "topk");
    record("topk", {x}, {out.values},
           [shape = x.shape(), d, indices = SavedTensor(out.indices)](const TensorList& g) -> TensorList {
             if (shape.empty())
               return {g[0].numel() == 1 ? g[0].reshape({}) : zeros({}, {g[0].dtype(), g[0].device()})};
             return {scatter_add(zeros(shape, {g[0].dtype(), g[0].device()}), d, indices.get(), g[0])};
           });
  }
  return out;
}

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  ValuesIndices out = untracked([&] { return ops::sort(x, dim, descending, stable); });
  if (autograd::needs_grad({x})) {
    const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "sort");
    record("sort", {x}, {out.values},
           [shape = x.shape(), d, indices = SavedTensor(out.indices)](const TensorList& g) -> TensorList {
             if (shape.empty()) return {g[0]};
             return {scatter_add(zeros(shape, {g[0].dtype(), g[0].device()}), d, indices.get(), g[0])};
           });
  }
  return out;
}

}  // namespace kiln
