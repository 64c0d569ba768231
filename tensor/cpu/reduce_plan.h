// DimSet and DimWalker: the index bookkeeping shared by the CPU reduction
// and softmax kernels.
//
// A reduction splits the input's dims into kept dims (one per output
// element) and reduced dims (walked for each output). Each group is a DimSet:
// sizes outermost first with, per dim, the element strides of every operand
// that moves with it. Dims of size 1 are dropped and neighbours laid out one
// after another in every operand are merged, so a contiguous block of any
// rank becomes one dim (as StridedLoop does for elementwise kernels).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tensor/error.h"

namespace kiln::cpu {

template <size_t N>
struct DimSet {
  std::vector<int64_t> sizes;                    // outermost first
  std::vector<std::array<int64_t, N>> strides;   // elements, per dim, per operand

  void add(int64_t size, const std::array<int64_t, N>& s) {
    if (size == 1) return;
    sizes.push_back(size);
    strides.push_back(s);
  }

  int64_t ndim() const { return static_cast<int64_t>(sizes.size()); }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }

  // Merges each dim into the one outside it when, for every operand, one
  // step of the outer dim equals a full sweep of the inner one.
  void coalesce() {
    std::vector<int64_t> merged_sizes;
    std::vector<std::array<int64_t, N>> merged_strides;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (!merged_sizes.empty()) {
        bool contiguous = true;
        for (size_t k = 0; k < N; ++k) {
          if (merged_strides.back()[k] != sizes[d] * strides[d][k]) contiguous = false;
        }
        if (contiguous) {
          merged_sizes.back() *= sizes[d];
          merged_strides.back() = strides[d];
          continue;
        }
      }
      merged_sizes.push_back(sizes[d]);
      merged_strides.push_back(strides[d]);
    }
    sizes = std::move(merged_sizes);
    strides = std::move(merged_strides);
  }

  // Removes and returns the innermost dim as {size, strides}; a set with no
  // dims yields {1, zeros}.
  std::pair<int64_t, std::array<int64_t, N>> pop_inner() {
    if (sizes.empty()) return {1, {}};
    std::pair<int64_t, std::array<int64_t, N>> inner{sizes.back(), strides.back()};
    sizes.pop_back();
    strides.pop_back();
    return inner;
  }
};

// Walks the flat indices start, start+1, ... of a DimSet (row-major),
// keeping each operand's element offset without a division per step.
template <size_t N>
class DimWalker {
 public:
  DimWalker(const DimSet<N>& set, int64_t start) : set_(set) {
    KILN_CHECK(set.ndim() <= kMaxDims, "DimWalker: more than ", kMaxDims, " dims that cannot be merged");
    for (int64_t d = set.ndim() - 1; d >= 0; --d) {
      index_[d] = start % set.sizes[d];
      start /= set.sizes[d];
      for (size_t k = 0; k < N; ++k) offsets_[k] += index_[d] * set.strides[d][k];
    }
  }

  const std::array<int64_t, N>& offsets() const { return offsets_; }
  int64_t offset(size_t k = 0) const { return offsets_[k]; }

  void next() {
    for (int64_t d = set_.ndim() - 1; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) offsets_[k] += set_.strides[d][k];
      if (++index_[d] < set_.sizes[d]) return;
      for (size_t k = 0; k < N; ++k) offsets_[k] -= set_.sizes[d] * set_.strides[d][k];
      index_[d] = 0;
    }
  }

 private:
  // Kernels build walkers per output row, so the index lives inline rather
  // than on the heap.
  static constexpr int64_t kMaxDims = 64;
  const DimSet<N>& set_;
  std::array<int64_t, kMaxDims> index_;
  std::array<int64_t, N> offsets_{};
};

}  // namespace kiln::cpu
