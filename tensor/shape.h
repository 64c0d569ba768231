// Shapes and strides: small helpers every op uses to validate and lay out tensors.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln {

// Sizes of each dimension, outermost first. Strides use the same type and
// count elements, not bytes.
using Shape = std::vector<int64_t>;

// Product of the sizes (1 for a 0-dim shape); throws naming `op` on a negative size.
int64_t shape_numel(const Shape& shape, std::string_view op = "shape");

// Row-major strides for `shape`.
Shape contiguous_strides(const Shape& shape);

// Maps a possibly negative dim into [0, ndim); throws naming `op` if out of range.
//   wrap_dim(-1, 4, "softmax") == 3
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);

// NumPy broadcasting of two shapes; throws naming `op` and both shapes when
// they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace kiln
