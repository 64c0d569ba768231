// StridedOffsets: element offsets of N same-shaped strided operands, for kernels.
//
// Note [Strided kernels]
// The CUDA counterpart of Note [Strided loops] (tensor/cpu/loops.h). The host
// merges dims that are laid out one after another in every operand and drops
// size-1 dims, exactly as StridedLoop does, so a contiguous tensor of any rank
// becomes one flat dim and a transposed matrix stays 2-d. The result travels
// to the kernel by value (sizes and element strides for at most
// kMaxKernelDims dims, innermost first), and each thread turns its linear
// index into one offset per operand. Layouts that still have more dims after
// merging are rare (a 9-d permutation); for_each_strided_launch peels their
// outermost dim on the host and launches once per slice.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace kiln::cuda {

inline constexpr int kMaxKernelDims = 8;

template <int N>
struct StridedOffsets {
  int ndim = 0;                             // 0: a single element
  int64_t sizes[kMaxKernelDims] = {};       // innermost first
  int64_t strides[kMaxKernelDims][N] = {};  // in elements, per dim, per operand

  // offsets[k] = element offset of linear (row-major) index `linear` in operand k.
  __device__ void offsets(int64_t linear, int64_t (&offsets)[N]) const {
    if (ndim == 1) {  // contiguous or a plain strided run: no division
#pragma unroll
      for (int k = 0; k < N; ++k) offsets[k] = linear * strides[0][k];
      return;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) offsets[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxKernelDims; ++d) {
      if (d == ndim) break;
      int64_t index = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) offsets[k] += index * strides[d][k];
    }
  }
};

// layout.offsets(linear, offsets) in 32-bit index arithmetic, for layouts of
// fewer than 2^32 elements. A 64-bit division is emulated in dozens of
// instructions; two of them per element (a bias broadcast over rows) would
// make a memory-bound kernel compute-bound.
template <int N>
__device__ inline void narrow_offsets(const StridedOffsets<N>& layout, int64_t linear, int64_t (&offsets)[N]) {
  if (layout.ndim <= 1) {
    layout.offsets(linear, offsets);
    return;
  }
#pragma unroll
  for (int k = 0; k < N; ++k) offsets[k] = 0;
  uint32_t rest = static_cast<uint32_t>(linear);
#pragma unroll
  for (int d = 0; d < kMaxKernelDims; ++d) {
    if (d == layout.ndim) break;
    const uint32_t size = static_cast<uint32_t>(layout.sizes[d]);
    const uint32_t index = rest % size;
    rest /= size;
#pragma unroll
    for (int k = 0; k < N; ++k) offsets[k] += static_cast<int64_t>(index) * layout.strides[d][k];
  }
}

// Offsets of element i of n: narrow arithmetic when n allows (the test is
// the same for every thread).
template <int N>
__device__ inline void strided_offsets(const StridedOffsets<N>& layout, int64_t i, int64_t n, int64_t (&offsets)[N]) {
  if (n <= static_cast<int64_t>(UINT32_MAX)) {
    narrow_offsets(layout, i, offsets);
  } else {
    layout.offsets(i, offsets);
  }
}

// Fills `layout` for the operands (same shape, operands[0] usually the
// output). Returns false when more than kMaxKernelDims dims remain after
// merging.
template <int N>
bool make_strided_offsets(const std::array<Tensor, N>& operands, StridedOffsets<N>& layout) {
  const Shape& shape = operands[0].shape();
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> strides;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, N> step;
    for (int k = 0; k < N; ++k) step[k] = operands[k].strides()[d];
    // Merge into the dim inside it when stepping once here equals stepping
    // over all of that dim, for every operand.
    bool mergeable = !sizes.empty();
    for (int k = 0; k < N && mergeable; ++k) mergeable = step[k] == sizes.back() * strides.back()[k];
    if (mergeable) {
      sizes.back() *= shape[d];
    } else {
      sizes.push_back(shape[d]);
      strides.push_back(step);
    }
  }
  if (sizes.size() > static_cast<size_t>(kMaxKernelDims)) return false;
  layout = StridedOffsets<N>{};
  layout.ndim = static_cast<int>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    layout.sizes[d] = sizes[d];
    for (int k = 0; k < N; ++k) layout.strides[d][k] = strides[d][k];
  }
  return true;
}

// Calls launch(operands, layout) once, or once per outermost slice when the
// layout has too many dims (Note [Strided kernels]).
template <int N, class Launch>
void for_each_strided_launch(const std::array<Tensor, N>& operands, const Launch& launch) {
  StridedOffsets<N> layout;
  if (make_strided_offsets<N>(operands, layout)) {
    launch(operands, layout);
    return;
  }
  for (int64_t i = 0; i < operands[0].size(0); ++i) {
    std::array<Tensor, N> slices;
    for (int k = 0; k < N; ++k) slices[k] = operands[k].select(0, i);
    for_each_strided_launch<N>(slices, launch);
  }
}

}  // namespace kiln::cuda
