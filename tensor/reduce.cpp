// Reductions and softmax: argument checks, result shapes and dtypes.
//
// The kernels (tensor/cpu/reduce.cpp, tensor/cpu/softmax.cpp) see only
// sorted, unique, non-negative dims and a keepdim-shaped output; everything
// torch users would hit as an error is rejected here, naming the op.
// mean, var, std and logsumexp are written with other ops (sum, amax and
// elementwise arithmetic), as torch's composite ops are, so every backend
// gets them from its reduce kernel.
#include "tensor/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/backend.h"
#include "tensor/elementwise.h"
#include "tensor/factory.h"

namespace kiln::ops {
namespace {

// The dims to reduce, wrapped, checked and sorted; empty `dims` means all.
Shape normalize_dims(const Tensor& x, const Shape& dims, std::string_view op) {
  int64_t ndim = x.dim();
  Shape wrapped;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    KILN_CHECK(std::find(wrapped.begin(), wrapped.end(), w) == wrapped.end(), op, ": dim ", w,
               " appears more than once in ", dims);
    wrapped.push_back(w);
  }
  // A 0-dim tensor accepts dim 0 / -1 but has nothing to reduce over.
  if (ndim == 0) return {};
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) wrapped.push_back(d);
  }
  std::sort(wrapped.begin(), wrapped.end());
  return wrapped;
}

bool is_reduced(const Shape& dims, int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); }

// x's shape with every reduced dim set to 1.
Shape keepdim_shape(const Tensor& x, const Shape& dims) {
  Shape shape = x.shape();
  for (int64_t d : dims) shape[d] = 1;
  return shape;
}

// x's shape with the reduced dims removed (or kept as 1 when keepdim).
Shape result_shape(const Tensor& x, const Shape& dims, bool keepdim) {
  if (keepdim) return keepdim_shape(x, dims);
  Shape shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!is_reduced(dims, d)) shape.push_back(x.size(d));
  }
  return shape;
}

// How many elements each output reduces over.
int64_t reduced_count(const Tensor& x, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  return n;
}

// Max and min have no identity, so an empty dim has no answer (as torch).
void check_nonempty(const Tensor& x, const Shape& dims, std::string_view op) {
  for (int64_t d : dims) {
    KILN_CHECK(x.size(d) != 0, op, ": cannot reduce over a dim of size 0 (dim ", d, " of a tensor of shape ",
               x.shape(), "), since ", op, " has no identity");
  }
}

void check_floating(const Tensor& x, std::string_view op) {
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating point tensor, got ", x.dtype(),
             " (convert it first, e.g. x.to(DType::Float32))");
}

bool is_half_precision(DType dtype) { return dtype == DType::Float16 || dtype == DType::BFloat16; }

// Runs a reduce kernel over normalized dims and shapes the result.
Tensor run_reduce(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim, DType out_dtype) {
  Tensor out = Tensor::empty(keepdim_shape(x, dims), {out_dtype, x.device()});
  backend_for(x.device()).reduce(op, out, x, dims);
  return keepdim ? out : out.view(result_shape(x, dims, keepdim));
}

// Integer and bool sums and products are exact in int64, as torch.
DType accumulating_dtype(DType dtype) { return is_floating(dtype) ? dtype : DType::Int64; }

ValuesIndices max_min_along(ReduceOp op, const Tensor& x, int64_t dim, bool keepdim, std::string_view name) {
  int64_t d = wrap_dim(dim, x.dim(), name);
  if (x.dim() == 0) {
    // A 0-dim tensor is its own max, at index 0.
    return {x.clone(), zeros({}, {DType::Int64, x.device()})};
  }
  check_nonempty(x, {d}, name);
  Shape keep = keepdim_shape(x, {d});
  Tensor values = Tensor::empty(keep, {x.dtype(), x.device()});
  Tensor indices = Tensor::empty(keep, {DType::Int64, x.device()});
  backend_for(x.device()).reduce_with_index(op, values, indices, x, d);
  if (keepdim) return {values, indices};
  Shape shape = result_shape(x, {d}, false);
  return {values.view(shape), indices.view(shape)};
}

Tensor arg_max_min(ReduceOp op, const Tensor& x, std::optional<int64_t> dim, bool keepdim, std::string_view name) {
  if (dim) return max_min_along(op, x, *dim, keepdim, name).indices;
  // Over the flattened tensor; keepdim then keeps every dim as size 1.
  KILN_CHECK(x.numel() != 0, name, ": cannot reduce an empty tensor of shape ", x.shape(),
             " without a dim, since ", name, " has no identity");
  Tensor index = max_min_along(op, x.reshape({-1}), 0, false, name).indices;
  return keepdim ? index.view(Shape(x.dim(), 1)) : index;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  Shape d = normalize_dims(x, dims, "sum");
  return run_reduce(ReduceOp::Sum, x, d, keepdim, accumulating_dtype(x.dtype()));
}

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, DType dtype) {
  // As torch: the input is cast to dtype first, so the sum runs in dtype.
  Tensor s = sum(x.to(dtype), dims, keepdim);
  return s.to(dtype);
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  check_floating(x, "mean");
  Shape d = normalize_dims(x, dims, "mean");
  double n = static_cast<double>(reduced_count(x, d));
  // 16-bit floats: sum and divide in float32 so that a large sum does not
  // overflow float16 before the division brings it back into range.
  if (is_half_precision(x.dtype())) return div(sum(x, d, keepdim, DType::Float32), n).to(x.dtype());
  // An empty reduction divides 0 by 0: NaN, as torch. (A C++ double does
  // not promote a float32 tensor; .to() only pins the contract.)
  return div(run_reduce(ReduceOp::Sum, x, d, keepdim, x.dtype()), n).to(x.dtype());
}

Tensor prod(const Tensor& x, const Shape& dims, bool keepdim) {
  Shape d = normalize_dims(x, dims, "prod");
  return run_reduce(ReduceOp::Prod, x, d, keepdim, accumulating_dtype(x.dtype()));
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  Shape d = normalize_dims(x, dims, "amax");
  check_nonempty(x, d, "amax");
  return run_reduce(ReduceOp::Max, x, d, keepdim, x.dtype());
}

Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  Shape d = normalize_dims(x, dims, "amin");
  check_nonempty(x, d, "amin");
  return run_reduce(ReduceOp::Min, x, d, keepdim, x.dtype());
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_along(ReduceOp::Max, x, dim, keepdim, "max");
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_along(ReduceOp::Min, x, dim, keepdim, "min");
}

Tensor max(const Tensor& x) {
  Shape d = normalize_dims(x, {}, "max");
  check_nonempty(x, d, "max");
  return run_reduce(ReduceOp::Max, x, d, false, x.dtype());
}

Tensor min(const Tensor& x) {
  Shape d = normalize_dims(x, {}, "min");
  check_nonempty(x, d, "min");
  return run_reduce(ReduceOp::Min, x, d, false, x.dtype());
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_max_min(ReduceOp::Max, x, dim, keepdim, "argmax");
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_max_min(ReduceOp::Min, x, dim, keepdim, "argmin");
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  check_floating(x, "var");
  KILN_CHECK(correction >= 0, "var: correction must be non-negative, got ", correction);
  Shape d = normalize_dims(x, dims, "var");
  // Two passes (mean, then squared deviations) rather than sum(x^2) - n*mean^2,
  // which cancels catastrophically when the mean is large against the spread.
  Tensor xc = is_half_precision(x.dtype()) ? x.to(DType::Float32) : x;
  Tensor deviation = sub(xc, mean(xc, d, true));
  Tensor squares = sum(mul(deviation, deviation), d, keepdim);
  // As torch: the divisor is max(N - correction, 0), so N <= correction
  // divides by zero and gives inf, or NaN when the squares sum to 0.
  int64_t divisor = std::max<int64_t>(reduced_count(x, d) - correction, 0);
  return div(squares, static_cast<double>(divisor)).to(x.dtype());
}

Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  check_floating(x, "std");
  KILN_CHECK(correction >= 0, "std: correction must be non-negative, got ", correction);
  Tensor xc = is_half_precision(x.dtype()) ? x.to(DType::Float32) : x;
  return sqrt(var(xc, dims, correction, keepdim)).to(x.dtype());
}

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  check_floating(x, "logsumexp");
  Shape d = normalize_dims(x, dims, "logsumexp");
  // The sum of nothing is 0, and log 0 = -inf, as torch.
  if (reduced_count(x, d) == 0) {
    return full(result_shape(x, d, keepdim), -std::numeric_limits<double>::infinity(), {x.dtype(), x.device()});
  }
  Tensor xc = is_half_precision(x.dtype()) ? x.to(DType::Float32) : x;
  // log sum exp(x) = m + log sum exp(x - m) with m the max, so exp never
  // overflows. An infinite max would make x - m NaN (inf - inf); using 0
  // there instead gives -inf for an all -inf row and inf for a row with inf.
  Tensor m = amax(xc, d, true);
  Tensor shift = where(ne(abs(m), std::numeric_limits<double>::infinity()), m, 0.0);
  Tensor result = add(log(sum(exp(sub(xc, shift)), d, true)), shift);
  if (!keepdim) result = result.view(result_shape(x, d, false));
  return result.to(x.dtype());
}

namespace {

Tensor run_softmax(const Tensor& x, int64_t dim, bool log, std::string_view op) {
  check_floating(x, op);
  int64_t d = wrap_dim(dim, x.dim(), op);
  Tensor out = Tensor::empty(x.shape(), {x.dtype(), x.device()});
  if (x.numel() == 0) return out;
  // A 0-dim tensor is a single row of one element.
  if (x.dim() == 0) {
    backend_for(x.device()).softmax(out.view({1}), x.view({1}), 0, log);
    return out;
  }
  backend_for(x.device()).softmax(out, x, d, log);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return run_softmax(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return run_softmax(x, dim, true, "log_softmax"); }

}  // namespace kiln::ops
