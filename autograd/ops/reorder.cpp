// Differentiable flip, roll, repeat and tile (tensor/reorder.h). flip and
// roll only move entries, so their backward moves the gradient back with
// the same op (flip again, roll the other way); repeat's sends each
// tile's gradient to the entry it copied, summing over the tiles. Each
// backward is written with these functions, so second derivatives come for
// free; tile is repeat of a padded list and records nothing itself.
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::TensorList;
using autograd::untracked;

Tensor flip(const Tensor& x, const Shape& dims) {
  Tensor out = untracked([&] { return ops::flip(x, dims); });
  if (autograd::needs_grad({x})) {
    record("flip", {x}, {out}, [dims](const TensorList& g) -> TensorList { return {flip(g[0], dims)}; });
  }
  return out;
}

Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  Tensor out = untracked([&] { return ops::roll(x, shifts, dims); });
  if (autograd::needs_grad({x})) {
    Shape back = shifts;
    // Negated shifts, each reduced first so that INT64_MIN cannot overflow.
    for (size_t k = 0; k < back.size(); ++k) {
      const int64_t n = dims.empty() ? x.numel() : x.size(dims[k]);
      back[k] = n == 0 ? 0 : -(back[k] % n);
    }
    record("roll", {x}, {out}, [back, dims](const TensorList& g) -> TensorList { return {roll(g[0], back, dims)}; });
  }
  return out;
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  Tensor out = untracked([&] { return ops::repeat(x, repeats); });
  if (autograd::needs_grad({x})) {
    // g as (repeats[0], size[0], repeats[1], size[1], ...) of x padded with
    // leading 1s, summed over the repeat dims.
    Shape tiles, repeat_dims;
    const size_t pad = repeats.size() - x.shape().size();
    for (size_t i = 0; i < repeats.size(); ++i) {
      tiles.push_back(repeats[i]);
      tiles.push_back(i < pad ? 1 : x.size(static_cast<int64_t>(i - pad)));
      repeat_dims.push_back(static_cast<int64_t>(2 * i));
    }
    record("repeat", {x}, {out}, [shape = x.shape(), tiles, repeat_dims](const TensorList& g) -> TensorList {
      if (repeat_dims.empty()) return {g[0]};  // a 0-dim x repeated by {}: a copy
      return {sum(g[0].reshape(tiles), repeat_dims).reshape(shape)};
    });
  }
  return out;
}

Tensor tile(const Tensor& x, const Shape& reps) {
  KILN_CHECK(x.defined(), "tile: got an undefined tensor");
  return repeat(x, ops::tile_repeats(reps, x.dim()));
}

}  // namespace kiln
