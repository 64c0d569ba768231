// StridedLoop: walks N same-shaped strided tensors element by element.
//
// Note [Strided loops]
// Elementwise kernels see tensors of one shape with arbitrary strides
// (transposed views, broadcast dims of stride 0). StridedLoop first merges
// dims that are laid out one after another in every operand ("coalescing"),
// so that a contiguous tensor of any rank becomes one flat run and a
// transposed 2-d view stays 2-d. It then hands the kernel runs along the
// innermost remaining dim: `inner(ptrs, byte_strides, n)` processes n
// elements starting at ptrs[k] and stepping byte_strides[k] bytes for operand
// k. Kernels put their fast path where every byte stride equals the element
// size (contiguous) or 0 (a broadcast scalar).
#pragma once

#include <array>
#include <cstdint>

#include "tensor/cpu/parallel.h"
#include "tensor/tensor.h"

namespace kiln::cpu {

template <size_t N>
class StridedLoop {
 public:
  // operands[0] is usually the output; all must have the same shape.
  explicit StridedLoop(const std::array<const Tensor*, N>& operands) {
    const Shape& shape = operands[0]->shape();
    for (size_t k = 0; k < N; ++k) base_[k] = static_cast<char*>(operands[k]->data_ptr());
    // Innermost first, dropping size-1 dims.
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (shape[d] == 1) continue;
      sizes_.push_back(shape[d]);
      std::array<int64_t, N> strides{};
      for (size_t k = 0; k < N; ++k) {
        strides[k] = operands[k]->strides()[d] * static_cast<int64_t>(operands[k]->element_size());
      }
      strides_.push_back(strides);
    }
    coalesce();
    numel_ = 1;
    for (int64_t s : sizes_) numel_ *= s;
    if (sizes_.empty()) {  // a single element
      sizes_.push_back(1);
      strides_.push_back({});
    }
  }

  int64_t numel() const { return numel_; }
  int64_t ndim() const { return static_cast<int64_t>(sizes_.size()); }
  // Byte strides of the innermost run, per operand.
  const std::array<int64_t, N>& inner_strides() const { return strides_[0]; }
  // The merged sizes and per-operand byte strides, innermost dim first.
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<std::array<int64_t, N>>& strides() const { return strides_; }
  // Address of element 0 of operand k.
  char* base(size_t k) const { return base_[k]; }

  // Runs inner(ptrs, byte_strides, n) over all elements, in parallel when
  // there are more than `grain` elements.
  template <class Inner>
  void run(int64_t grain, const Inner& inner) const {
    parallel_for(0, numel_, grain, [&](int64_t begin, int64_t end) { run_range(begin, end, inner); });
  }

  // Runs over the linear element range [begin, end) (row-major order).
  template <class Inner>
  void run_range(int64_t begin, int64_t end, const Inner& inner) const {
    // Multi-index of `begin`, innermost first.
    std::array<int64_t, kMaxDims> index{};
    int64_t rest = begin;
    for (size_t d = 0; d < sizes_.size(); ++d) {
      index[d] = rest % sizes_[d];
      rest /= sizes_[d];
    }
    std::array<char*, N> ptrs;
    for (size_t k = 0; k < N; ++k) {
      ptrs[k] = base_[k];
      for (size_t d = 0; d < sizes_.size(); ++d) ptrs[k] += index[d] * strides_[d][k];
    }
    int64_t pos = begin;
    while (pos < end) {
      int64_t n = std::min(sizes_[0] - index[0], end - pos);
      inner(ptrs.data(), strides_[0].data(), n);
      pos += n;
      // Advance the multi-index by n along dim 0, carrying into outer dims.
      index[0] += n;
      for (size_t k = 0; k < N; ++k) ptrs[k] += n * strides_[0][k];
      for (size_t d = 0; d + 1 < sizes_.size() && index[d] == sizes_[d]; ++d) {
        index[d] = 0;
        ++index[d + 1];
        for (size_t k = 0; k < N; ++k) ptrs[k] += strides_[d + 1][k] - sizes_[d] * strides_[d][k];
      }
    }
  }

  static constexpr size_t kMaxDims = 64;

 private:
  // Merges dim d+1 into dim d when, for every operand, stepping once in d+1
  // equals stepping sizes[d] times in d.
  void coalesce() {
    std::vector<int64_t> sizes;
    std::vector<std::array<int64_t, N>> strides;
    for (size_t d = 0; d < sizes_.size(); ++d) {
      if (!sizes.empty()) {
        bool mergeable = true;
        for (size_t k = 0; k < N; ++k) {
          if (strides_[d][k] != sizes.back() * strides.back()[k]) mergeable = false;
        }
        if (mergeable) {
          sizes.back() *= sizes_[d];
          continue;
        }
      }
      sizes.push_back(sizes_[d]);
      strides.push_back(strides_[d]);
    }
    KILN_CHECK(sizes.size() <= kMaxDims, "StridedLoop: more than ", kMaxDims, " non-mergeable dims");
    sizes_ = std::move(sizes);
    strides_ = std::move(strides);
  }

  std::array<char*, N> base_{};
  std::vector<int64_t> sizes_;                    // innermost first
  std::vector<std::array<int64_t, N>> strides_;  // bytes, per dim, per operand
  int64_t numel_ = 0;
};

}  // namespace kiln::cpu
