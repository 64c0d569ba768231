// Front-ends of tril, triu, masked_fill, topk, sort and multinomial: argument
// checks naming the op and the values, result shapes, and one device
// decision each (Note [Device dispatch]).
#include "tensor/select.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "tensor/backend.h"
#include "tensor/elementwise.h"
#include "tensor/elementwise_internal.h"
#include "tensor/factory.h"
#include "tensor/multinomial_draw.h"

namespace kiln::ops {
namespace {

// (M, N) Bool: true where column j and row i keep their entry, j - i <=
// diagonal (lower) or j - i >= diagonal (upper). Built from two aranges
// compared by one broadcasting kernel, so only the (M, N) mask itself is
// allocated, once for all leading dims.
Tensor triangle_mask(int64_t rows, int64_t cols, int64_t diagonal, bool lower, Device device) {
  // Beyond these bounds every entry, or none, is kept: clamping keeps
  // i + diagonal from overflowing.
  diagonal = std::clamp<int64_t>(diagonal, -rows - 1, cols + 1);
  Tensor row_bound = arange(diagonal, rows + diagonal, 1, {DType::Int64, device}).view({rows, 1});  // i + diagonal
  Tensor col = arange(0, cols, 1, {DType::Int64, device}).view({1, cols});                          // j
  return lower ? le(col, row_bound) : ge(col, row_bound);
}

Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, std::string_view op) {
  KILN_CHECK(x.defined(), op, ": got an undefined tensor");
  KILN_CHECK(x.dim() >= 2, op, ": expected a tensor of at least 2 dims (the matrices in the last two), got shape ",
             x.shape());
  const int64_t rows = x.size(-2), cols = x.size(-1);
  if (x.numel() == 0) return Tensor::empty(x.shape(), {x.dtype(), x.device()});
  Tensor keep = triangle_mask(rows, cols, diagonal, lower, x.device());
  // A 0-dim zero of x's own dtype, so `where` keeps x's dtype (Bool too).
  return where(keep, x, zeros({}, {x.dtype(), x.device()}));
}

// Whether `value` can be stored in `dtype` as masked_fill promises: any
// number in a floating tensor, an in-range integer in an integer tensor,
// 0 or 1 in a Bool tensor.
bool representable(Scalar value, DType dtype) {
  if (is_floating(dtype)) return true;
  const bool integral = !value.is_floating() || std::trunc(value.to<double>()) == value.to<double>();
  if (!integral) return false;
  if (value.is_floating()) {
    const double v = value.to<double>();
    if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) return false;
  }
  const int64_t v = value.is_floating() ? static_cast<int64_t>(value.to<double>()) : value.to<int64_t>();
  return visit_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      return v == 0 || v == 1;
    } else if constexpr (std::is_integral_v<T>) {
      return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
             static_cast<uint64_t>(std::max<int64_t>(v, 0)) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    } else {
      return true;
    }
  });
}

void check_masked_fill(const Tensor& x, const Tensor& mask, Scalar value, std::string_view op) {
  KILN_CHECK(x.defined() && mask.defined(), op, ": got an undefined tensor");
  KILN_CHECK(mask.dtype() == DType::Bool, op, ": expected a bool mask, got ", mask.dtype());
  elementwise::check_same_device(op, x, mask);
  KILN_CHECK(representable(value, x.dtype()), op, ": value ", value, " cannot be stored in a tensor of ", x.dtype());
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, /*lower=*/true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, /*lower=*/false, "triu"); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_masked_fill(x, mask, value, "masked_fill");
  broadcast_shapes(x.shape(), mask.shape(), "masked_fill");  // named as masked_fill's error, not where's
  return where(mask, scalar_tensor(value, {x.dtype(), x.device()}), x);
}

Tensor& masked_fill_(Tensor& x, const Tensor& mask, Scalar value) {
  check_masked_fill(x, mask, value, "masked_fill_");
  elementwise::check_in_place("masked_fill_", x, x.dtype());
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill_");
  KILN_CHECK(shape == x.shape(), "masked_fill_: a mask of shape ", mask.shape(),
             " does not broadcast to the shape of x, ", x.shape());
  if (x.numel() == 0) return x;
  // The kernel may write x while reading it at the same element, but a mask
  // in x's own memory laid out differently would be read after being
  // overwritten (masked_fill_(b, b.t(), ...)): copy that first.
  Tensor m = mask.storage() == x.storage() ? mask.clone() : mask;
  backend_for(x.device()).where(x, m.expand(shape), scalar_tensor(value, {x.dtype(), x.device()}).expand(shape), x);
  x.bump_version();
  return x;
}

TopK topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  (void)sorted;  // the kernels always sort; torch allows any order otherwise
  KILN_CHECK(x.defined(), "topk: got an undefined tensor");
  KILN_CHECK(x.dtype() != DType::Bool, "topk: expected a numeric tensor, got bool");
  const int64_t d = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  KILN_CHECK(k >= 0 && k <= n, "topk: k ", k, " is out of range for dim ", d, " of size ", n, " (shape ", x.shape(),
             "; expected 0 <= k <= ", n, ")");
  if (x.dim() == 0) {
    // One entry: itself at index 0, or nothing.
    TopK one{x.reshape({1}).narrow(0, 0, k).clone(), zeros({k}, {DType::Int64, x.device()})};
    return k == 1 ? TopK{one.values.view({}), one.indices.view({})} : one;
  }
  // The kernels see rows along the last dim: swap `dim` there, and back.
  const int64_t last = x.dim() - 1;
  Tensor moved = d == last ? x : x.transpose(d, last);
  Shape out_shape = moved.shape();
  out_shape[last] = k;
  Tensor values = Tensor::empty(out_shape, {x.dtype(), x.device()});
  Tensor indices = Tensor::empty(out_shape, {DType::Int64, x.device()});
  const int64_t rows = moved.numel() / std::max<int64_t>(n, 1);
  if (values.numel() > 0) {
    Tensor in = moved.contiguous().view({rows, n});
    backend_for(x.device()).topk(values.view({rows, k}), indices.view({rows, k}), in, k, largest);
  }
  if (d == last) return {values, indices};
  return {values.transpose(d, last), indices.transpose(d, last)};
}

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  (void)stable;  // topk's order is total, so the sort is always stable
  KILN_CHECK(x.defined(), "sort: got an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "sort");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  // The kernels order numbers; bools sort as the bytes 0 and 1.
  const bool is_bool = x.dtype() == DType::Bool;
  TopK sorted = topk(is_bool ? x.to(DType::UInt8) : x, n, d, /*largest=*/descending);
  if (is_bool) sorted.values = sorted.values.to(DType::Bool);
  return {sorted.values, sorted.indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  KILN_CHECK(x.defined(), "argsort: got an undefined tensor");
  wrap_dim(dim, x.dim(), "argsort");
  return sort(x, dim, descending, stable).indices;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  KILN_CHECK(probs.defined(), "multinomial: got an undefined tensor");
  KILN_CHECK(probs.dim() == 1 || probs.dim() == 2,
             "multinomial: expected probabilities of shape (n) or (rows, n), got shape ", probs.shape());
  KILN_CHECK(probs.is_floating_point(), "multinomial: expected floating point probabilities, got ", probs.dtype());
  const int64_t n = probs.size(-1);
  KILN_CHECK(n > 0, "multinomial: the rows of probabilities of shape ", probs.shape(), " have no categories");
  KILN_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got ", num_samples);
  KILN_CHECK(replacement || num_samples <= n, "multinomial: cannot draw ", num_samples,
             " samples without replacement from ", n, " categories");
  const int64_t rows = probs.dim() == 1 ? 1 : probs.size(0);
  Tensor out = Tensor::empty({rows, num_samples}, {DType::Int64, probs.device()});
  if (rows > 0) {
    Generator& g = gen ? *gen : default_generator();
    const uint64_t seed = g.seed();
    const uint64_t offset = g.advance(static_cast<uint64_t>(rows) * static_cast<uint64_t>(num_samples));
    backend_for(probs.device())
        .multinomial(out, probs.contiguous().view({rows, n}), num_samples, replacement, seed, offset);
  }
  return probs.dim() == 1 ? out.view({num_samples}) : out;
}

}  // namespace kiln::ops

namespace kiln::multinomial_draw {

std::string error_message(int64_t a, int64_t b, int64_t c) {
  const int64_t row = b;
  switch (a % 4) {
    case kBadEntry:
      return detail::str("multinomial: probability ", std::bit_cast<double>(c), " at index ", a / 4, " of row ", row,
                         " is not allowed (every entry must be finite and >= 0)");
    case kBadTotal:
      return detail::str("multinomial: the probabilities of row ", row, " sum to ", std::bit_cast<double>(c),
                         " (the sum must be positive and finite)");
    case kTooFewPositive:
      return detail::str("multinomial: row ", row, " has ", a / 4, " positive probabilities, too few to draw ", c,
                         " samples without replacement");
    default:
      return detail::str("multinomial: unknown problem code ", a, " in row ", row);
  }
}

}  // namespace kiln::multinomial_draw
