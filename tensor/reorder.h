// Reordering and repeating entries: flip, roll, repeat and tile, with
// torch's semantics.
//
// Each is built from kernels every backend already has (index_select for
// flip, cat of two slices for roll, an expanded view copied out for repeat),
// so every device has them with no kernel of their own. Results are new
// contiguous tensors of x's dtype and device (any dtype), never views of x,
// also when nothing moves.
#pragma once

#include "tensor/tensor.h"

namespace kiln::ops {

// x with the order of the entries reversed along each of `dims`, as
// torch.flip. dims may be negative, must be distinct, and may be empty (a
// copy); a 0-dim x accepts 0 and -1. One copy per flipped dim of size > 1.
//   flip(arange(6).view({2, 3}), {1})   -> [[2, 1, 0], [5, 4, 3]]
Tensor flip(const Tensor& x, const Shape& dims);

// x with its entries shifted along dims, wrapping around, as torch.roll:
// entry i of dim d moves to (i + shifts[k]) mod size(d). shifts and dims
// pair up (the same count, dims may repeat: the shifts add up); with dims
// empty x is rolled as if flattened, by one shift, and keeps its shape.
// Shifts may be negative or larger than the size.
//   roll(arange(6).view({2, 3}), {1}, {1})   -> [[2, 0, 1], [5, 3, 4]]
//   roll(arange(6).view({2, 3}), {1})        -> [[5, 0, 1], [2, 3, 4]]
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims = {});

// x tiled repeats[i] times along each dim, as torch.Tensor.repeat: repeats
// has at least x.dim() entries, each >= 0; when it has more, x is first
// viewed with leading dims of size 1. The result's size i is repeats[i]
// times that size.
//   repeat(from_vector<float>({1, 2}), {2, 2})   -> [[1, 2, 1, 2], [1, 2, 1, 2]]
Tensor repeat(const Tensor& x, const Shape& repeats);

// repeat with torch.tile's rule for a short `reps`: when it has fewer
// entries than x has dims, ones are prepended (tile(x, {2}) on a matrix
// repeats its columns).
Tensor tile(const Tensor& x, const Shape& reps);

// `reps` with ones prepended up to `dim` entries (tile's rule), so that
// autograd's tile is repeat of the same list.
Shape tile_repeats(const Shape& reps, int64_t dim);

}  // namespace kiln::ops
