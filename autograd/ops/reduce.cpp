// Differentiable reductions and softmax. A reduction's gradient goes back
// over the reduced dims by broadcasting (unreduce); max-like reductions send
// it only to the elements that won, and softmax-like ops use their output
// (record_with_outputs).
#include <algorithm>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::record_with_outputs;
using autograd::SavedTensor;
using autograd::TensorList;
using autograd::untracked;

namespace {

// `t`, the result of reducing an input of rank `rank` over `dims`, with the
// reduced dims back as size 1 (the keepdim shape), so that it broadcasts
// against the input.
Tensor keep_dims(const Tensor& t, int64_t rank, Shape dims, bool keepdim) {
  if (keepdim || rank == 0) return t;
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  for (int64_t& d : dims) d = wrap_dim(d, rank, "reduce");
  std::sort(dims.begin(), dims.end());
  Tensor out = t;
  for (int64_t d : dims) out = out.unsqueeze(d);
  return out;
}

// The gradient of a reduction over `dims` of an input of `shape`: g gets
// size-1 dims back where they were reduced, then broadcasts.
Tensor unreduce(const Tensor& g, const Shape& shape, const Shape& dims, bool keepdim) {
  return keep_dims(g, static_cast<int64_t>(shape.size()), dims, keepdim).expand(shape);
}

// How many elements of x each output of a reduction over `dims` combines.
int64_t reduced_count(const Tensor& x, const Shape& dims) {
  if (x.dim() == 0) return 1;
  if (dims.empty()) return x.numel();
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(wrap_dim(d, x.dim(), "reduce"));
  return n;
}

// The gradient of amax/amin/max()/min() with output `out`: split evenly among
// the elements equal to the extreme, as torch. A NaN result equals no
// element. With nan_wins (max() and min() over everything, as torch's
// evenly_distribute_backward) it then goes to the NaN elements instead;
// amax/amin, as torch's scale_grad_by_count, multiply the mask by g / 0
// and so give NaN over the whole slice.
Tensor extreme_backward(const Tensor& g, const Tensor& x, const Tensor& out, const Shape& dims, bool keepdim,
                        bool nan_wins) {
  int64_t rank = x.dim();
  Tensor winners, count;
  {
    NoGradGuard no_grad;  // which elements won is a constant of the backward
    Tensor out_kept = keep_dims(out, rank, dims, keepdim);
    winners = ops::eq(x, out_kept);
    if (nan_wins) winners = ops::logical_or(winners, ops::logical_and(ops::ne(x, x), ops::ne(out_kept, out_kept)));
    count = ops::sum(winners, rank == 0 ? Shape{} : dims, /*keepdim=*/true);
  }
  Tensor share = div(keep_dims(g, rank, dims, keepdim), count);
  if (nan_wins) return where(winners, share, 0.0);
  return mul(share, untracked([&] { return winners.to(g.dtype()); }));
}

// The gradient of max/min along `dim`: all of it to the element at the
// returned index.
Tensor indexed_backward(const Tensor& g, const Shape& shape, int64_t dim, bool keepdim, const Tensor& indices) {
  if (shape.empty()) return g;
  int64_t d = wrap_dim(dim, static_cast<int64_t>(shape.size()), "max");
  Tensor g_kept = keepdim ? g : g.unsqueeze(d);
  Tensor index = keepdim ? indices : indices.unsqueeze(d);
  return scatter_add(zeros(shape, {g.dtype(), g.device()}), d, index, g_kept);
}

// d var / dx = 2 (x - mean) / (N - correction). The divisor is clamped at 0
// as in the forward, so N <= correction gives inf (NaN where x == mean), as
// torch.
Tensor var_backward(const Tensor& g, const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  int64_t divisor = std::max<int64_t>(reduced_count(x, dims) - correction, 0);
  Shape mean_dims = x.dim() == 0 ? Shape{} : dims;
  Tensor deviation = sub(x, mean(x, mean_dims, /*keepdim=*/true));
  return mul(mul(keep_dims(g, x.dim(), dims, keepdim), deviation), 2.0 / static_cast<double>(divisor));
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  if (auto cast = autograd::autocast_float32(x)) return sum((*cast)[0], dims, keepdim);
  Tensor out = untracked([&] { return ops::sum(x, dims, keepdim); });
  if (autograd::needs_grad({x})) {
    record("sum", {x}, {out}, [shape = x.shape(), dims, keepdim](const TensorList& g) -> TensorList {
      return {unreduce(g[0], shape, dims, keepdim)};
    });
  }
  return out;
}

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, DType dtype) {
  Tensor out = untracked([&] { return ops::sum(x, dims, keepdim, dtype); });
  if (autograd::needs_grad({x})) {
    record("sum", {x}, {out}, [shape = x.shape(), dims, keepdim](const TensorList& g) -> TensorList {
      return {unreduce(g[0], shape, dims, keepdim)};
    });
  }
  return out;
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  Tensor out = untracked([&] { return ops::mean(x, dims, keepdim); });
  if (autograd::needs_grad({x})) {
    int64_t count = out.numel() == 0 ? 0 : x.numel() / out.numel();
    record("mean", {x}, {out}, [shape = x.shape(), dims, keepdim, count](const TensorList& g) -> TensorList {
      return {unreduce(div(g[0], count), shape, dims, keepdim)};
    });
  }
  return out;
}

Tensor prod(const Tensor& x, const Shape& dims, bool keepdim) {
  if (auto cast = autograd::autocast_float32(x)) return prod((*cast)[0], dims, keepdim);
  Tensor out = untracked([&] { return ops::prod(x, dims, keepdim); });
  if (!autograd::needs_grad({x})) return out;
  auto backward = [saved_x = SavedTensor(x), dims, keepdim](const TensorList& g,
                                                            const TensorList& outs) -> TensorList {
    // d prod / dx_i is the product of the other elements of x_i's slice:
    // prod / x_i while x_i != 0. A zero x_i gets the product of the rest of
    // its slice when it is the slice's only zero, else 0. Zeros are replaced
    // by 1 before dividing so that no branch, even an unused one, makes a
    // NaN that a second derivative would pick up. (With two or more zeros in
    // a slice the second derivative here is 0, where torch's exclusive
    // cumulative products give the product of the rest for each pair.)
    const Tensor& xv = saved_x.get();
    int64_t rank = xv.dim();
    Shape kept_dims = rank == 0 ? Shape{} : dims;
    Tensor g_kept = keep_dims(g[0], rank, dims, keepdim);
    Tensor out_kept = keep_dims(outs[0], rank, dims, keepdim);
    Tensor nonzero, single_zero;
    bool any_zero;
    {
      NoGradGuard no_grad;
      nonzero = ops::ne(xv, 0);
      any_zero = ops::sum(ops::logical_not(nonzero)).item<int64_t>() > 0;
      if (any_zero) single_zero = ops::eq(ops::sum(ops::logical_not(nonzero), kept_dims, true), 1);
    }
    if (!any_zero) return {mul(g_kept, div(out_kept, xv))};
    Tensor x_safe = where(nonzero, xv, 1.0);
    Tensor rest_of_zero = where(single_zero, prod(x_safe, kept_dims, /*keepdim=*/true), 0.0);
    return {mul(g_kept, where(nonzero, div(out_kept, x_safe), rest_of_zero))};
  };
  record_with_outputs("prod", {x}, {out}, backward);
  return out;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  Tensor out = untracked([&] { return ops::amax(x, dims, keepdim); });
  if (autograd::needs_grad({x})) {
    record_with_outputs("amax", {x}, {out}, [saved_x = SavedTensor(x), dims, keepdim](const TensorList& g,
                                                                                     const TensorList& outs) {
      return TensorList{extreme_backward(g[0], saved_x.get(), outs[0], dims, keepdim, /*nan_wins=*/false)};
    });
  }
  return out;
}

Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  Tensor out = untracked([&] { return ops::amin(x, dims, keepdim); });
  if (autograd::needs_grad({x})) {
    record_with_outputs("amin", {x}, {out}, [saved_x = SavedTensor(x), dims, keepdim](const TensorList& g,
                                                                                     const TensorList& outs) {
      return TensorList{extreme_backward(g[0], saved_x.get(), outs[0], dims, keepdim, /*nan_wins=*/false)};
    });
  }
  return out;
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  ValuesIndices out = untracked([&] { return ops::max(x, dim, keepdim); });
  // Only the values are differentiable; the indices are integers.
  if (autograd::needs_grad({x})) {
    record("max", {x}, {out.values},
           [shape = x.shape(), dim, keepdim, indices = SavedTensor(out.indices)](const TensorList& g) -> TensorList {
             return {indexed_backward(g[0], shape, dim, keepdim, indices.get())};
           });
  }
  return out;
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  ValuesIndices out = untracked([&] { return ops::min(x, dim, keepdim); });
  if (autograd::needs_grad({x})) {
    record("min", {x}, {out.values},
           [shape = x.shape(), dim, keepdim, indices = SavedTensor(out.indices)](const TensorList& g) -> TensorList {
             return {indexed_backward(g[0], shape, dim, keepdim, indices.get())};
           });
  }
  return out;
}

Tensor max(const Tensor& x) {
  Tensor out = untracked([&] { return ops::max(x); });
  if (autograd::needs_grad({x})) {
    record_with_outputs("max", {x}, {out}, [saved_x = SavedTensor(x)](const TensorList& g, const TensorList& outs) {
      return TensorList{extreme_backward(g[0], saved_x.get(), outs[0], {}, false, /*nan_wins=*/true)};
    });
  }
  return out;
}

Tensor min(const Tensor& x) {
  Tensor out = untracked([&] { return ops::min(x); });
  if (autograd::needs_grad({x})) {
    record_with_outputs("min", {x}, {out}, [saved_x = SavedTensor(x)](const TensorList& g, const TensorList& outs) {
      return TensorList{extreme_backward(g[0], saved_x.get(), outs[0], {}, false, /*nan_wins=*/true)};
    });
  }
  return out;
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  Tensor out = untracked([&] { return ops::var(x, dims, correction, keepdim); });
  if (autograd::needs_grad({x})) {
    record("var", {x}, {out}, [saved_x = SavedTensor(x), dims, correction, keepdim](const TensorList& g) {
      return TensorList{var_backward(g[0], saved_x.get(), dims, correction, keepdim)};
    });
  }
  return out;
}

Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  Tensor out = untracked([&] { return ops::std(x, dims, correction, keepdim); });
  if (autograd::needs_grad({x})) {
    // d sqrt(var) = d var / (2 std); 0 where std is 0, as torch.
    record_with_outputs("std", {x}, {out}, [saved_x = SavedTensor(x), dims, correction, keepdim](
                                                const TensorList& g, const TensorList& outs) {
      Tensor positive = untracked([&] { return ops::ne(outs[0], 0); });
      Tensor g_var = where(positive, div(g[0], mul(outs[0], 2.0)), 0.0);
      return TensorList{var_backward(g_var, saved_x.get(), dims, correction, keepdim)};
    });
  }
  return out;
}

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  if (auto cast = autograd::autocast_float32(x)) return logsumexp((*cast)[0], dims, keepdim);
  Tensor out = untracked([&] { return ops::logsumexp(x, dims, keepdim); });
  if (autograd::needs_grad({x})) {
    // d logsumexp / dx = exp(x - logsumexp), the softmax over the dims.
    record_with_outputs("logsumexp", {x}, {out}, [saved_x = SavedTensor(x), dims, keepdim](const TensorList& g,
                                                                                          const TensorList& outs) {
      const Tensor& xv = saved_x.get();
      Tensor weights = exp(sub(xv, keep_dims(outs[0], xv.dim(), dims, keepdim)));
      return TensorList{mul(keep_dims(g[0], xv.dim(), dims, keepdim), weights)};
    });
  }
  return out;
}

Tensor softmax(const Tensor& x, int64_t dim) {
  if (auto cast = autograd::autocast_float32(x)) return softmax((*cast)[0], dim);
  Tensor out = untracked([&] { return ops::softmax(x, dim); });
  if (autograd::needs_grad({x})) {
    // y = softmax(x): dx = y * (g - sum(g * y)) over the dim.
    record_with_outputs("softmax", {x}, {out}, [dim](const TensorList& g, const TensorList& outs) {
      const Tensor& y = outs[0];
      Tensor gy = mul(g[0], y);
      return TensorList{sub(gy, mul(y, sum(gy, {dim}, /*keepdim=*/true)))};
    });
  }
  return out;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (auto cast = autograd::autocast_float32(x)) return log_softmax((*cast)[0], dim);
  Tensor out = untracked([&] { return ops::log_softmax(x, dim); });
  if (autograd::needs_grad({x})) {
    // y = log_softmax(x): dx = g - exp(y) * sum(g) over the dim.
    record_with_outputs("log_softmax", {x}, {out}, [dim](const TensorList& g, const TensorList& outs) {
      return TensorList{sub(g[0], mul(exp(outs[0]), sum(g[0], {dim}, /*keepdim=*/true)))};
    });
  }
  return out;
}

}  // namespace kiln
