// flip, roll, repeat and tile: argument checks naming the op and the
// values, then other ops' kernels (tensor/reorder.h).
#include "tensor/reorder.h"

#include <algorithm>
#include <vector>

#include "tensor/factory.h"
#include "tensor/index.h"
#include "tensor/shape_ops.h"

namespace kiln::ops {
namespace {

void check_defined(const Tensor& x, std::string_view op) { KILN_CHECK(x.defined(), op, ": got an undefined tensor"); }

// Rolls x along one dim by `shift` (reduced mod the size, > 0 and < size):
// the last `shift` entries come first.
Tensor roll_one(const Tensor& x, int64_t shift, int64_t dim) {
  const int64_t n = x.size(dim);
  return cat({x.narrow(dim, n - shift, shift), x.narrow(dim, 0, n - shift)}, dim);
}

}  // namespace

Tensor flip(const Tensor& x, const Shape& dims) {
  check_defined(x, "flip");
  std::vector<bool> flipped(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), false);
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, x.dim(), "flip");
    KILN_CHECK(!flipped[d], "flip: dim ", d, " appears more than once in dims ", dims);
    flipped[d] = true;
  }
  Tensor out = x;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t n = x.size(d);
    if (!flipped[d] || n <= 1) continue;
    // index_select copies: each flipped dim is one pass over the tensor.
    out = index_select(out, d, arange(n - 1, -1, -1, {DType::Int64, x.device()}));
  }
  return out.is_same(x) ? x.clone() : out;
}

Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  check_defined(x, "roll");
  KILN_CHECK(!shifts.empty(), "roll: shifts must not be empty");
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll: without dims x is rolled as flattened, by one shift; got ", shifts.size(),
               " shifts ", shifts);
    return roll(x.reshape({-1}), shifts, {0}).view(x.shape());
  }
  KILN_CHECK(shifts.size() == dims.size(), "roll: shifts ", shifts, " and dims ", dims,
             " must have the same length (", shifts.size(), " != ", dims.size(), ")");
  KILN_CHECK(x.dim() > 0, "roll: cannot roll a 0-dim tensor along dims ", dims,
             " (without dims it is rolled as flattened)");
  // The shift of each dim, summed over repeats, reduced mod its size.
  std::vector<int64_t> total(static_cast<size_t>(x.dim()), 0);
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = wrap_dim(dims[k], x.dim(), "roll");
    const int64_t n = x.size(d);
    if (n == 0) continue;
    const int64_t s = shifts[k] % n;  // in (-n, n): no overflow in the sum below
    total[d] = ((total[d] + s) % n + n) % n;
  }
  Tensor out = x;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (total[d] != 0) out = roll_one(out, total[d], d);
  }
  return out.is_same(x) ? x.clone() : out;
}

Shape tile_repeats(const Shape& reps, int64_t dim) {
  for (int64_t r : reps) KILN_CHECK(r >= 0, "tile: reps must be non-negative, got ", reps);
  Shape padded = reps;
  if (static_cast<int64_t>(padded.size()) < dim) padded.insert(padded.begin(), dim - padded.size(), 1);
  return padded;
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  check_defined(x, "repeat");
  const int64_t m = static_cast<int64_t>(repeats.size());
  KILN_CHECK(m >= x.dim(), "repeat: repeats ", repeats, " has ", m, " entries, fewer than the ", x.dim(),
             " dims of x (shape ", x.shape(), ")");
  Shape out_shape(repeats.size());
  Shape tiled;  // (repeats[0], size[0], repeats[1], size[1], ...): the padded x expanded
  Shape padded(static_cast<size_t>(m - x.dim()), 1);
  padded.insert(padded.end(), x.shape().begin(), x.shape().end());
  for (int64_t i = 0; i < m; ++i) {
    KILN_CHECK(repeats[i] >= 0, "repeat: repeats must be non-negative, got ", repeats);
    out_shape[i] = repeats[i] * padded[i];
    tiled.push_back(repeats[i]);
    tiled.push_back(padded[i]);
  }
  if (shape_numel(out_shape, "repeat") == 0) return Tensor::empty(out_shape, {x.dtype(), x.device()});
  // x as (1, size[0], 1, size[1], ...), each 1 expanded to its repeat count,
  // then copied out once.
  Tensor interleaved = x.reshape(padded);
  for (int64_t i = 0; i < m; ++i) interleaved = interleaved.unsqueeze(2 * i);
  Tensor out = Tensor::empty(out_shape, {x.dtype(), x.device()});
  out.view(tiled).copy_(interleaved.expand(tiled));
  return out;
}

Tensor tile(const Tensor& x, const Shape& reps) {
  check_defined(x, "tile");
  return repeat(x, tile_repeats(reps, x.dim()));
}

}  // namespace kiln::ops
