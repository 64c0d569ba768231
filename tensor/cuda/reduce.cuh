// The machinery shared by the CUDA reductions (reduce.cu) and softmax
// (softmax.cu): warp and block tree reductions, and the plan that splits an
// input's dims into kept dims (one per output) and reduced dims.
//
// Note [CUDA reduction layouts]
// The host sorts the kept dims and the reduced dims each by decreasing input
// stride and merges neighbours laid out one after another, so whatever the
// view's dim order the innermost reduced dim is the one closest to
// contiguous (a permutation that makes the reduced dims innermost, done
// without moving data). Then one of two kernels runs:
// - groups: when the reduced elements of an output are contiguous, a warp
//   (rows up to kWarpRowLimit) or a block of 256 threads reduces each
//   output, its threads reading neighbouring elements (coalesced) and
//   combining in a shuffle tree. Rows longer than kBlockChunk are cut into
//   chunks of that many elements, one block each; the chunk results go to a
//   workspace and a second kernel combines them (the two-pass grid
//   reduction that a full reduction of a large tensor needs).
// - threads: otherwise (the reduced dims are outside a contiguous kept dim,
//   as a sum over dim 0 of (N, M), or rows are very short), one thread per
//   output walks its reduced elements, neighbouring threads reading
//   neighbouring columns. When there are few outputs the rows are cut into
//   splits, combined by the same second kernel.
// Every choice (kernel, chunk and split sizes) depends only on the shape and
// strides, and every combination happens in a fixed tree or in order, never
// by atomics: results are bit-identical from run to run.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/strided.cuh"

namespace kiln::cuda {

inline constexpr int kWarpThreads = 32;
inline constexpr int kReduceThreads = 256;  // threads per block of every reduction kernel
inline constexpr int64_t kWarpRowLimit = 1024;
inline constexpr int64_t kBlockChunk = 8192;

// v from the lane `delta` above, for any trivially copyable type (bool,
// 8-bit integers and value-index pairs included), moved in 32-bit words.
template <class A>
__device__ inline A shuffle_down(const A& v, int delta) {
  constexpr int kWords = static_cast<int>((sizeof(A) + 3) / 4);
  int words[kWords] = {};
  memcpy(words, &v, sizeof(A));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_down_sync(0xffffffffu, words[w], delta);
  A out;
  memcpy(&out, words, sizeof(A));
  return out;
}

// Lane 0 gets combine over the warp's 32 values, always in the same tree.
template <class A, class Combine>
__device__ inline A warp_reduce(A v, const Combine& combine) {
#pragma unroll
  for (int delta = kWarpThreads / 2; delta > 0; delta /= 2) v = combine(v, shuffle_down(v, delta));
  return v;
}

// Thread 0 gets combine over the block's values (kReduceThreads threads).
// Every thread of the block must call it.
template <class A, class Combine>
__device__ inline A block_reduce(A v, const Combine& combine, A identity) {
  __shared__ A warp_totals[kReduceThreads / kWarpThreads];
  const int lane = threadIdx.x % kWarpThreads, warp = threadIdx.x / kWarpThreads;
  v = warp_reduce(v, combine);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kReduceThreads / kWarpThreads ? warp_totals[lane] : identity;
    v = warp_reduce(v, combine);
  }
  __syncthreads();  // warp_totals may be rewritten by the next call
  return v;
}

// Dims of one group (kept or reduced) with K strides each, outermost first.
template <int K>
struct DimList {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, K>> strides;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }

  void add(int64_t size, const std::array<int64_t, K>& s) {
    if (size == 1) return;
    sizes.push_back(size);
    strides.push_back(s);
  }

  // Sorts by decreasing |stride of operand 0| (stable), then merges each dim
  // into the one outside it where that is a plain continuation in every
  // operand (Note [CUDA reduction layouts]).
  void sort_and_merge() {
    std::vector<size_t> order(sizes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return std::abs(strides[a][0]) > std::abs(strides[b][0]); });
    DimList merged;
    for (size_t i : order) {
      if (!merged.sizes.empty()) {
        bool continues = true;
        for (int k = 0; k < K; ++k) continues = continues && merged.strides.back()[k] == sizes[i] * strides[i][k];
        if (continues) {
          merged.sizes.back() *= sizes[i];
          merged.strides.back() = strides[i];
          continue;
        }
      }
      merged.sizes.push_back(sizes[i]);
      merged.strides.push_back(strides[i]);
    }
    *this = std::move(merged);
  }

  // Stride of operand k in the innermost dim; 0 when there are no dims.
  int64_t inner_stride(int k) const { return strides.empty() ? 0 : strides.back()[k]; }

  // The kernel-side form; false when more than kMaxKernelDims dims remain.
  bool to_offsets(StridedOffsets<K>& out) const {
    if (sizes.size() > static_cast<size_t>(kMaxKernelDims)) return false;
    out = StridedOffsets<K>{};
    out.ndim = static_cast<int>(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
      size_t src = sizes.size() - 1 - d;  // StridedOffsets is innermost first
      out.sizes[d] = sizes[src];
      for (int k = 0; k < K; ++k) out.strides[d][k] = strides[src][k];
    }
    return true;
  }
};

// dims of a tensor of rank `rank` in the order that puts `reduced` (sorted)
// last, kept dims first, each group in ascending order: the fallback
// permutation for layouts with too many dims (Note [Strided kernels]).
inline Shape reduced_last_order(int64_t rank, const Shape& reduced) {
  Shape order;
  for (int64_t d = 0; d < rank; ++d) {
    if (!std::binary_search(reduced.begin(), reduced.end(), d)) order.push_back(d);
  }
  for (int64_t d : reduced) order.push_back(d);
  return order;
}

}  // namespace kiln::cuda
