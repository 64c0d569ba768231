// cat, stack, split and chunk.
//
// cat and stack allocate the result once and copy each input into a narrow()ed
// view of it with Tensor::copy_, so the copy kernel does the dtype conversion
// and the strided reads; split and chunk return views and copy nothing.
#include "tensor/shape_ops.h"

#include "tensor/shape.h"

namespace kiln::ops {

// torch still accepts 1-d empty tensors of any rank mismatch in cat (code that
// grows a tensor with `acc = cat({acc, x})` starts from an empty one), so they
// take part in dtype promotion but are otherwise skipped.
static bool is_skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.numel() == 0; }

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
  }
  DType dtype = tensors[0].dtype();
  Device device = tensors[0].device();
  // The first tensor that is not skipped fixes the rank and the other sizes.
  int64_t ref = -1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.device() == device, "cat: all tensors must be on one device; got ", device, " (tensor 0) and ",
               t.device(), " (tensor ", i, ")");
    KILN_CHECK(t.dim() > 0, "cat: zero-dimensional tensor (tensor ", i, ") cannot be concatenated");
    dtype = promote_types(dtype, t.dtype());
    if (ref < 0 && !is_skipped_in_cat(t)) ref = static_cast<int64_t>(i);
  }
  if (ref < 0) return Tensor::empty({0}, {dtype, device});  // only empty 1-d inputs

  const Shape& ref_shape = tensors[ref].shape();
  int64_t ndim = static_cast<int64_t>(ref_shape.size());
  dim = wrap_dim(dim, ndim, "cat");
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (is_skipped_in_cat(t)) continue;
    KILN_CHECK(t.dim() == ndim, "cat: tensors must have the same number of dims; got ", ref_shape, " and ",
               t.shape(), " (tensor ", i, ")");
    for (int64_t d = 0; d < ndim; ++d) {
      KILN_CHECK(d == dim || t.size(d) == ref_shape[d], "cat: sizes of tensors must match except in dim ", dim,
                 "; got ", ref_shape, " and ", t.shape(), " at dim ", d, " (tensor ", i, ")");
    }
    total += t.size(dim);
  }

  Shape out_shape = ref_shape;
  out_shape[dim] = total;
  Tensor out = Tensor::empty(out_shape, {dtype, device});
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (is_skipped_in_cat(t) || t.size(dim) == 0) continue;
    out.narrow(dim, offset, t.size(dim)).copy_(t);
    offset += t.size(dim);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    KILN_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: shapes ", tensors[0].shape(), " and ",
               tensors[i].shape(), " differ (tensor ", i, ")");
  }
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(tensors.size());
  for (const Tensor& t : tensors) unsqueezed.push_back(t.unsqueeze(dim));
  return cat(unsqueezed, dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t n = x.size(dim);
  KILN_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size,
             " for dim ", dim, " of size ", n);
  std::vector<Tensor> parts;
  if (n == 0) {  // as torch: one empty piece
    parts.push_back(x.narrow(dim, 0, 0));
    return parts;
  }
  for (int64_t start = 0; start < n; start += split_size) {
    parts.push_back(x.narrow(dim, start, std::min(split_size, n - start)));
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t sum = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split: sizes must be non-negative, got ", sizes);
    sum += s;
  }
  KILN_CHECK(sum == x.size(dim), "split: sizes ", sizes, " sum to ", sum, " but dim ", dim, " has size ",
             x.size(dim));
  std::vector<Tensor> parts;
  parts.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(x.narrow(dim, start, s));
    start += s;
  }
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  KILN_CHECK(chunks > 0, "chunk: expected chunks > 0, got ", chunks);
  dim = wrap_dim(dim, x.dim(), "chunk");
  int64_t n = x.size(dim);
  // torch gives `chunks` empty pieces for an empty dim, but never more pieces
  // than ceil(n / ceil(n / chunks)) otherwise: chunk(6 elements, 4) -> 2, 2, 2.
  if (n == 0) return split(x, std::vector<int64_t>(chunks, 0), dim);
  return split(x, (n + chunks - 1) / chunks, dim);
}

}  // namespace kiln::ops
