// The QuantParams of a view, from its base's (tensor/view.cpp).
//
// Note [Quantization parameters through views]
// A view shows the same elements as its base, so it stands on the same grid:
// the views of view.cpp give the new tensor its base's QuantParams (any
// dtype: a quantized tensor, or a float tensor whose values lie on a grid),
// adjusted to where the elements went:
// - per tensor: the same params, shared, whatever the view;
// - per channel along `axis`: the axis is renumbered when dims move
//   (permute, transpose, squeeze, unsqueeze, select of another dim, expand's
//   new leading dims); slicing along the axis (slice, narrow) slices the
//   scales and zero points; expanding a 1-channel axis repeats its one
//   scale; a reshape (view, flatten) keeps the axis when some dim of the new
//   shape has the axis's size and the same number of elements before it,
//   which is exactly when every element keeps its channel.
// A view that destroys the axis -- select on it, squeeze of a 1-channel
// axis, a reshape that merges it with or splits it into other dims, an
// as_strided other than the identity -- throws kiln::Error naming the op:
// the elements would have no channel to read their scale from. Copies
// (clone, contiguous, to) keep the params as they are (tensor/copy.cpp).
//
// Each function returns `params` itself when nothing changes (null in, null
// out; per tensor in, the same pointer out). Dims are already wrapped.
#pragma once

#include <memory>
#include <string_view>

#include "tensor/tensor.h"

namespace kiln::quant_view {

using Params = std::shared_ptr<const QuantParams>;

// dims[i] is the base dim that becomes dim i (permute, transpose).
Params permuted(const Params& params, const Shape& dims);
// Dim `dim` keeps indices start, start + step, ... (size of them).
Params sliced(const Params& params, int64_t dim, int64_t start, int64_t step, int64_t size);
// Dim `dim` disappears (select, squeeze).
Params dim_removed(const Params& params, int64_t dim, std::string_view op);
// A size-1 dim is inserted at `dim` of the result (unsqueeze).
Params dim_inserted(const Params& params, int64_t dim);
// `base_shape` expanded to `sizes` (which may add leading dims).
Params expanded(const Params& params, const Shape& base_shape, const Shape& sizes);
// The same elements in row-major order seen with `new_shape`.
Params reshaped(const Params& params, const Shape& old_shape, const Shape& new_shape, std::string_view op);
// as_strided: per channel only when the geometry is the base's own.
Params restrided(const Params& params, const Tensor& base, const Shape& sizes, const Shape& strides,
                 int64_t offset);

}  // namespace kiln::quant_view
