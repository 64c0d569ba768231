// Differentiable cumsum and cumprod (tensor/scan.h).
//
// cumsum: out_j = sum_{i <= j} x_i, so dL/dx_i = sum_{j >= i} g_j, the
// scan of the gradient from the other end (reverse_cumsum), whose own
// gradient is cumsum again: second derivatives come for free.
//
// cumprod: out_j = prod_{i <= j} x_i, so dL/dx_i = sum_{j >= i} g_j *
// prod_{m <= j, m != i} x_m. Dividing out_j by x_i gives that product only
// where x_i is not zero; the backward therefore splits each slice at its
// first zero z (as torch's cumprod_backward):
// - i < z (or no zero): sum_{j >= i} g_j out_j / x_i, every x_i non-zero;
// - i = z: sum_{j >= z} g_j * (the cumulative product with x_z taken as 1)_j;
// - i > z: 0, since every product it enters also holds x_z = 0.
// That split is exact for the gradient but not for its own derivative: for
// i > z the gradient is 0 at x_z = 0 without its derivative in x_z being 0.
// When the backward is itself recorded (create_graph), the gradient is
// therefore computed from the definition instead, O(n^2) per slice, as
// torch does: row i of an (n, n) matrix is the cumulative product with x_i
// taken as 1, and grad_i = sum_{j >= i} g_j * row_i[j].
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::record_with_outputs;
using autograd::SavedTensor;
using autograd::TensorList;
using autograd::untracked;

namespace {

// sum_{j >= i} x_j along dim, recorded so that its gradient is cumsum.
Tensor reverse_cumsum(const Tensor& x, int64_t dim) {
  Tensor out = untracked([&] { return ops::reverse_cumsum(x, dim); });
  if (autograd::needs_grad({x})) {
    record("reverse_cumsum", {x}, {out}, [dim](const TensorList& g) -> TensorList { return {cumsum(g[0], dim)}; });
  }
  return out;
}

// x, g: (..., n) with the scanned dim last.
Tensor cumprod_backward_by_definition(const Tensor& g, const Tensor& x) {
  const int64_t n = x.size(-1);
  Shape square = x.shape();
  square.push_back(n);  // (..., n, n): [i][j]
  Tensor diagonal = ops::eq(arange(0, n, 1, {DType::Int64, x.device()}).view({n, 1}),
                            arange(0, n, 1, {DType::Int64, x.device()}).view({1, n}));  // (n, n) Bool
  Tensor rows = cumprod(masked_fill(x.unsqueeze(-2).expand(square), diagonal, 1), -1);  // (..., n, n)
  return sum(triu(mul(rows, g.unsqueeze(-2))), {-1});                                  // j >= i
}

Tensor cumprod_backward(const Tensor& g, const Tensor& x, const Tensor& out, int64_t dim) {
  if (x.dim() == 0) return g;  // one entry: out = x
  if (GradMode::is_enabled()) {
    return cumprod_backward_by_definition(g.transpose(dim, -1), x.transpose(dim, -1)).transpose(dim, -1);
  }
  // The masks depend on x only through comparisons: they carry no gradient.
  Tensor is_zero = ops::eq(x, Scalar(0));                     // Bool, x's shape
  Tensor zeros_so_far = ops::cumsum(is_zero, dim);              // Int64: zeros at or before each entry
  Tensor before_first_zero = ops::eq(zeros_so_far, Scalar(0));  // i < z
  Tensor first_zero = ops::logical_and(is_zero, ops::eq(zeros_so_far, Scalar(1)));  // i = z

  Tensor nonzero_x = masked_fill(x, ops::logical_not(before_first_zero), 1);
  Tensor before = div(reverse_cumsum(mul(g, out), dim), nonzero_x);
  Tensor at = reverse_cumsum(mul(g, cumprod(masked_fill(x, first_zero, 1), dim)), dim);
  return where(before_first_zero, before, where(first_zero, at, 0));
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  Tensor out = untracked([&] { return ops::cumsum(x, dim, dtype); });
  if (autograd::needs_grad({x})) {
    const int64_t d = wrap_dim(dim, x.dim(), "cumsum");
    record("cumsum", {x}, {out}, [d, dtype = x.dtype()](const TensorList& g) -> TensorList {
      return {reverse_cumsum(g[0], d).to(dtype)};
    });
  }
  return out;
}

Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  Tensor out = untracked([&] { return ops::cumprod(x, dim, dtype); });
  if (autograd::needs_grad({x})) {
    const int64_t d = wrap_dim(dim, x.dim(), "cumprod");
    record_with_outputs("cumprod", {x}, {out},
                        [d, saved_x = SavedTensor(x)](const TensorList& g, const TensorList& outputs) -> TensorList {
                          const Tensor& xv = saved_x.get();
                          // The backward runs in the result's dtype and returns x's.
                          Tensor x_in_out_dtype = xv.to(outputs[0].dtype());
                          return {cumprod_backward(g[0], x_in_out_dtype, outputs[0], d).to(xv.dtype())};
                        });
  }
  return out;
}

}  // namespace kiln
