// Differentiable indexing. Gathering ops (index_select, gather) send their
// gradient back with a scatter-add into zeros, so indices that repeat sum
// their gradients; scatter_add's gradient for its source is a gather. Each
// is written with the other, so second derivatives come for free.
#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;
using autograd::untracked;

namespace {

// `t` grown with zeros at the end of every dim to `shape`: scatter_add reads
// only the part of src that the index covers, and the rest of src gets a
// zero gradient.
Tensor pad_with_zeros(const Tensor& t, const Shape& shape) {
  Tensor out = t;
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (out.size(d) == shape[d]) continue;
    Shape rest = out.shape();
    rest[d] = shape[d] - out.size(d);
    out = cat({out, zeros(rest, {t.dtype(), t.device()})}, d);
  }
  return out;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = untracked([&] { return ops::index_select(x, dim, index); });
  if (autograd::needs_grad({x})) {
    int64_t d = wrap_dim(dim, x.dim(), "index_select");
    record("index_select", {x}, {out},
           [shape = x.shape(), d, saved_index = SavedTensor(index)](const TensorList& g) -> TensorList {
             // g: x's shape with index.numel() at d. The index, laid along d
             // and expanded over the other dims, scatters each slice of g
             // back to the slice it came from (torch's index_add).
             Shape along(shape.size(), 1);
             along[d] = g[0].size(d);
             Tensor spread = saved_index.get().reshape(along).expand(g[0].shape());
             return {scatter_add(zeros(shape, {g[0].dtype(), g[0].device()}), d, spread, g[0])};
           });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = untracked([&] { return ops::gather(x, dim, index); });
  if (autograd::needs_grad({x})) {
    record("gather", {x}, {out},
           [shape = x.shape(), dim, saved_index = SavedTensor(index)](const TensorList& g) -> TensorList {
             return {scatter_add(zeros(shape, {g[0].dtype(), g[0].device()}), dim, saved_index.get(), g[0])};
           });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  if (auto cast = autograd::autocast_promote(x, src)) return scatter_add((*cast)[0], dim, index, (*cast)[1]);
  Tensor out = untracked([&] { return ops::scatter_add(x, dim, index, src); });
  if (autograd::needs_grad({x, src})) {
    bool need_src = src.requires_grad();
    record("scatter_add", {x, src}, {out},
           [dim, need_src, src_shape = src.shape(),
            saved_index = SavedTensor(index)](const TensorList& g) -> TensorList {
             // out = x + (src scattered): x's gradient passes unchanged, and
             // each src element gets the gradient of where it was added.
             Tensor gsrc = need_src ? pad_with_zeros(gather(g[0], dim, saved_index.get()), src_shape) : Tensor();
             return {g[0], gsrc};
           });
  }
  return out;
}

}  // namespace kiln
