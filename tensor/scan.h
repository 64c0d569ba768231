// Cumulative sums and products along a dim, as torch.cumsum and
// torch.cumprod. Their kernels are a kernel group (tensor/scan_kernels.h).
#pragma once

#include <optional>

#include "tensor/tensor.h"

namespace kiln::ops {

// out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...] along `dim`
// (negative counts from the end; a 0-dim x takes dim 0 or -1). The result
// has x's shape and `dtype` when given, else x's dtype, except that bool
// and integer x give Int64 (torch's rule); x is converted to that dtype
// before the sum. Bool results are refused.
//   cumsum(tensor({1, 2, 3}), 0)  -> [1, 3, 6]
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// The same with products: cumprod(tensor({1, 2, 3}), 0) -> [1, 2, 6].
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// The scan from the other end, out[i] = x[i] op ... op x[n-1]: what the
// backward of cumsum needs (the gradient of x[i] gathers those of out[i..]).
// x's dtype is kept, as it is already the result's in a backward.
Tensor reverse_cumsum(const Tensor& x, int64_t dim);

}  // namespace kiln::ops
