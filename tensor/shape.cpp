#include "tensor/shape.h"

#include <algorithm>

#include "tensor/error.h"

namespace kiln {

int64_t shape_numel(const Shape& shape, std::string_view op) {
  int64_t n = 1;
  for (int64_t s : shape) {
    KILN_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape);
    n *= s;
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  // A 0-dim tensor accepts dim 0 and -1, as in PyTorch.
  int64_t range = std::max<int64_t>(ndim, 1);
  KILN_CHECK(dim >= -range && dim < range, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
             " dimensions (expected [", -range, ", ", range - 1, "])");
  return dim < 0 ? dim + range : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    // Align from the right: missing leading dims count as 1.
    int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    KILN_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", a, " and ", b,
               " cannot be broadcast (dim ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace kiln
