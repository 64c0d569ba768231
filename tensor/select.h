// Selecting and sampling: triangles of matrices, masked fills, the k best
// entries along a dim, sorting, and draws from categorical distributions.
//
// tril, triu and masked_fill are built from existing kernels (a Bool mask
// from index comparisons, then `where`), so every backend has them; topk and
// multinomial have kernels of their own (Backend::topk and
// Backend::multinomial, tensor/cpu/select.cpp and tensor/cuda/select.cu),
// which see (rows, n) contiguous rows: the front-ends move the dim last.
// sort is topk of every entry: a full sort per row on the CPU, O(n log n);
// on CUDA a radix select that keeps everything, then a bitonic sort of the
// row padded to a power of two, O(n log^2 n) work in one block per row.
#pragma once

#include "tensor/random.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace kiln {

// The k best entries along a dim and where they were (topk).
struct TopK {
  Tensor values;
  Tensor indices;  // Int64
};

}  // namespace kiln

namespace kiln::ops {

// The lower (tril) or upper (triu) triangle of the matrices in the last two
// dims of x (..., M, N), the rest set to zero, as torch.tril/triu: tril
// keeps (i, j) with j - i <= diagonal, triu those with j - i >= diagonal, so
// diagonal 0 is the main diagonal, > 0 above it, < 0 below. x needs at least
// 2 dims; any dtype. The result is a new contiguous tensor of x's dtype.
//   tril(ones({3, 3}))      -> [[1,0,0],[1,1,0],[1,1,1]]
//   triu(ones({3, 3}), 1)   -> [[0,1,1],[0,0,1],[0,0,0]]
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// A copy of x with `value` wherever the Bool `mask` is true, as
// torch.masked_fill: the result has the broadcast shape of x and mask (x's
// own shape when mask broadcasts to it) and x's dtype. `value` must be
// representable in x's dtype: any number for floating x (rounded, inf and
// NaN included), an integer in range for integer x, 0/1 or a bool for Bool x.
//   Tensor scores = masked_fill(scores, causal_mask.logical_not(), -INFINITY);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
// In place: mask must broadcast to x's shape; x must not be a broadcast view.
// Bumps x's version.
Tensor& masked_fill_(Tensor& x, const Tensor& mask, Scalar value);

// The k largest (largest) or smallest entries of x along `dim`, as
// torch.topk: values and their Int64 indices, with x's shape except k at
// `dim`. The entries are always in order, best first, whatever `sorted`
// says (torch leaves the order unspecified when sorted is false); among
// equal values the lower index comes first, and NaN counts as larger than
// every number (first for largest, last for smallest). Requires 0 <= k <=
// x.size(dim) and a dtype other than Bool; a 0-dim x is one entry.
// The results are views with `dim` moved back in place (not contiguous
// unless dim is the last).
//   TopK best = topk(logits, 50);   // logits (B, V) -> values, indices (B, 50)
TopK topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

// The entries of x along `dim` in ascending (or descending) order and their
// Int64 indices, as torch.sort: NaN sorts as larger than every number (last
// ascending, first descending) and -0 equals 0. The sort is always stable,
// equal entries keeping their order, whatever `stable` says (torch allows
// any order of ties without it). Any dtype, bool included; a 0-dim x is one
// entry. Like topk's, the results are views with `dim` moved back in place.
//   auto [values, indices] = sort(scores, -1, /*descending=*/true);
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// sort's indices alone, as torch.argsort.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);

// Draws num_samples category indices from each row of probs, (n) or
// (rows, n), with probability proportional to the entries, as
// torch.multinomial: Int64 (num_samples) or (rows, num_samples). Without
// replacement no index repeats within a row, and each draw is proportional
// to the entries not drawn yet. probs is floating; its entries need not sum
// to 1 but must be finite and >= 0 with a positive, finite sum per row, and
// without replacement a row needs at least num_samples positive entries;
// otherwise kiln::Error names the row and the entry (on CUDA when the host
// next waits for the device, Note [CUDA kernel errors]). Note [Multinomial
// draws] (tensor/multinomial_draw.h): the samples depend only on the
// generator's state, never on the thread count or the device, and the
// generator advances by rows * num_samples. Costs O(n) per row plus, per
// draw, O(n / 256 + 256); without replacement the row is copied once.
//   Tensor next = multinomial(softmax(logits / temperature, -1), 1, false, &gen);  // (B, 1)
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);

}  // namespace kiln::ops
