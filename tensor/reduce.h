// Reductions over any set of dims, with keepdim, plus softmax.
//
// `dims` empty means all dims. Negative dims count from the end; repeated
// dims are an error. Integer and bool sums accumulate in int64 and return
// Int64, as torch; float16/bfloat16 accumulate in float32.
#pragma once

#include <optional>

#include "tensor/tensor.h"

namespace kiln {

// Values along one dim and where they came from: max/min's extremes (the
// index of the first), sort's entries in order.
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // Int64
};

}  // namespace kiln

namespace kiln::ops {

Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, DType dtype);  // accumulate/return in dtype
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);  // floating inputs only; empty -> NaN
Tensor prod(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Max/min propagate NaN; reducing over a dim of size 0 is an error (there is
// no identity), while sum and prod of nothing are 0 and 1.
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements, 0-dim
Tensor min(const Tensor& x);
// Index of the max/min along `dim`; without a dim, over the flattened tensor.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// Variance and standard deviation with Bessel's correction by default
// (correction = 1), as torch.var: sum((x - mean)^2) / max(N - correction, 0).
// When N <= correction that divides by zero, giving inf, or NaN when the
// squared deviations sum to 0 (a single element), as torch does. Floating
// inputs only.
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// log(sum(exp(x))) without overflow (the max is factored out); a row of
// all -inf, or an empty one, gives -inf. Floating inputs only.
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);

// Along any dim of any layout, with the max subtracted so that large inputs
// do not overflow. A row whose max is inf or NaN (all -inf included) gives
// NaN, as torch. Floating inputs only.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace kiln::ops
