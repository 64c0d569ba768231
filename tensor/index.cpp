// Front-ends of the index ops: validate dims, shapes, dtypes and devices,
// allocate the result, and hand over to the backend (Note [Device dispatch]).
// Index values are checked by the kernels, which are the ones that read them.
#include "tensor/index.h"

#include <algorithm>
#include <limits>

#include "tensor/backend.h"
#include "tensor/factory.h"

namespace kiln::ops {

static void check_index_tensor(const Tensor& x, const Tensor& index, std::string_view op) {
  KILN_CHECK(x.defined() && index.defined(), op, ": got an undefined tensor");
  KILN_CHECK(index.dtype() == DType::Int64, op, ": index must be int64, got ", index.dtype());
  KILN_CHECK(index.device() == x.device(), op, ": x is on ", x.device(), " but index is on ", index.device());
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index_tensor(x, index, "index_select");
  KILN_CHECK(x.dim() > 0, "index_select: cannot index a 0-dim tensor");
  KILN_CHECK(index.dim() <= 1, "index_select: index must be 1-d, got shape ", index.shape());
  dim = wrap_dim(dim, x.dim(), "index_select");
  Tensor flat_index = index.dim() == 0 ? index.unsqueeze(0) : index;
  Shape out_shape = x.shape();
  out_shape[dim] = flat_index.numel();
  Tensor out = Tensor::empty(out_shape, {x.dtype(), x.device()});
  if (out.numel() > 0) backend_for(x.device()).index_select(out, x, dim, flat_index);
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index_tensor(x, index, "gather");
  KILN_CHECK(index.dim() == x.dim(), "gather: index must have as many dims as x; got index ", index.shape(),
             " and x ", x.shape());
  dim = wrap_dim(dim, x.dim(), "gather");
  for (int64_t d = 0; d < x.dim(); ++d) {
    KILN_CHECK(d == dim || index.size(d) <= x.size(d), "gather: index ", index.shape(), " is larger than x ",
               x.shape(), " at dim ", d, " (only dim ", dim, " may be larger)");
  }
  Tensor out = Tensor::empty(index.shape(), {x.dtype(), x.device()});
  if (out.numel() > 0) backend_for(x.device()).gather(out, x, dim, index);
  return out;
}

Tensor& scatter_add_(Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_tensor(x, index, "scatter_add");
  KILN_CHECK(src.defined(), "scatter_add: src is undefined");
  KILN_CHECK(src.device() == x.device(), "scatter_add: x is on ", x.device(), " but src is on ", src.device());
  KILN_CHECK(src.dtype() == x.dtype(), "scatter_add: src must have x's dtype; got ", src.dtype(), " for x of ",
             x.dtype());
  KILN_CHECK(index.dim() == x.dim() && src.dim() == x.dim(),
             "scatter_add: x, index and src must have the same number of dims; got x ", x.shape(), ", index ",
             index.shape(), " and src ", src.shape());
  dim = wrap_dim(dim, x.dim(), "scatter_add");
  for (int64_t d = 0; d < x.dim(); ++d) {
    KILN_CHECK(x.stride(d) != 0 || x.size(d) <= 1, "scatter_add: x of shape ", x.shape(), " and strides ",
               x.strides(), " is expanded (stride 0 in dim ", d, "), so in-place sums would overlap; clone it first");
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    KILN_CHECK(index.size(d) <= src.size(d), "scatter_add: index ", index.shape(), " is larger than src ",
               src.shape(), " at dim ", d);
    KILN_CHECK(d == dim || index.size(d) <= x.size(d), "scatter_add: index ", index.shape(), " is larger than x ",
               x.shape(), " at dim ", d, " (only dim ", dim, " may be larger)");
  }
  if (index.numel() > 0) backend_for(x.device()).scatter_add(x, dim, index, src);
  x.bump_version();
  return x;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CHECK(x.defined(), "scatter_add: x is undefined");
  Tensor out = x.clone();
  scatter_add_(out, dim, index, src);
  return out;
}

void check_index_range(const Tensor& index, int64_t limit, const IndexErrorMessage& message) {
  KILN_CHECK(index.defined() && index.dtype() == DType::Int64,
             "check_index_range: index must be a defined int64 tensor");
  if (index.numel() > 0) backend_for(index.device()).check_index_range(index, limit, message);
}

Tensor one_hot(const Tensor& labels, int64_t num_classes) {
  KILN_CHECK(labels.defined(), "one_hot: labels are undefined");
  KILN_CHECK(labels.dtype() == DType::Int64, "one_hot: labels must be int64, got ", labels.dtype());
  // The labels decide the output's size, so they are read on the host
  // whichever device they live on.
  Tensor host = labels.cpu().contiguous();
  const int64_t* p = host.data<int64_t>();
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
  for (int64_t i = 0; i < host.numel(); ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  KILN_CHECK(host.numel() == 0 || lo >= 0, "one_hot: labels must be non-negative, got ", lo);
  if (num_classes < 0) {
    KILN_CHECK(host.numel() > 0, "one_hot: cannot infer num_classes from an empty labels tensor");
    num_classes = hi + 1;
  } else {
    KILN_CHECK(hi < num_classes, "one_hot: label ", hi, " is out of range for num_classes ", num_classes);
  }

  // out[..., labels[...]] += 1 over zeros: the scatter_add kernel on the
  // labels' own device.
  Shape out_shape = labels.shape();
  out_shape.push_back(num_classes);
  Tensor out = zeros(out_shape, {DType::Int64, labels.device()});
  if (labels.numel() > 0) {
    Tensor index = labels.unsqueeze(-1);  // (*, 1)
    Tensor src = ones({1}, {DType::Int64, labels.device()}).expand(index.shape());
    backend_for(labels.device()).scatter_add(out, out.dim() - 1, index, src);
  }
  return out;
}

}  // namespace kiln::ops
