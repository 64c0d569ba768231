// What the CPU batch norm (tensor/cpu/norm.cpp) and layer norm
// (tensor/cpu/layer_norm.cpp) kernels share: sums over contiguous runs for
// every dtype, two-pass moments, and sums down the columns of a (rows, width)
// array. Include only from those two files.
//
// Note [Norm layouts]
// Batch norm sees x as (N, C, S), S the product of the dims after C.
// - planes (S >= kMinPlane, tensor/cpu/norm.cpp): each (n, c) plane is S
//   contiguous values, summed horizontally with SIMD lanes; threads split the
//   N*C planes (long planes cut into pieces), and the per-plane results are
//   merged per channel afterwards, so channels need not outnumber threads.
// - columns (S < kMinPlane, e.g. the (N, C) input of BatchNorm1d): planes are
//   too short for lanes to pay, so x is read as N rows of W = C*S columns and
//   whole rows are added into per-column accumulators, which vectorises across
//   columns. Threads split blocks of rows and chunks of columns; column c*S+s
//   belongs to channel c.
// Layer norm (tensor/cpu/layer_norm.cpp) normalises contiguous rows, which
// threads split; its weight and bias gradients are column sums.
//
// Every cut (plane, row block, column chunk) depends on the shape alone, and
// partial results are merged in a fixed order, so results do not depend on
// the number of threads.
//
// Contiguous runs are summed by the kernels of tensor/cpu/norm_simd.h; column
// sums add kColumnBlockRows rows in the compute type before joining a
// float64 total (Note [Blocked summation] in tensor/cpu/reduce.cpp).
// Variances take two passes (row_moments below; the column layout does the
// same per column).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/norm_simd.h"
#include "tensor/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// Below about this many elements work stays on the calling thread.
constexpr int64_t kGrain = 16384;
// A column sum's unit: up to kColumnChunk columns of a block of rows, added
// kColumnBlockRows rows at a time in the compute type before joining float64
// totals. Row blocks hold at least kMinBlockRows rows and number at most
// kMaxRowBlocks, so their partial results stay a small fraction of the input.
constexpr int64_t kColumnChunk = 512;
constexpr int64_t kColumnBlockRows = 128;
constexpr int64_t kMinBlockRows = 64;
constexpr int64_t kMaxRowBlocks = 64;

// Count, mean and M2 (sum of squared deviations from the mean) of a group.
struct Moments {
  double count = 0;
  double mean = 0;
  double m2 = 0;
};

// Chan et al.'s pairwise update: the moments of the union of two groups.
inline Moments merge(const Moments& a, const Moments& b) {
  double count = a.count + b.count;
  if (count == 0) return a;
  double delta = b.mean - a.mean;
  double weight = b.count / count;
  return {count, a.mean + delta * weight, a.m2 + b.m2 + delta * delta * a.count * weight};
}

using ShiftedSumsFn = NormSums (*)(const float*, int64_t, float);
using GradSumsFn = NormSums (*)(const float*, const float*, const float*, int64_t, float);

// Sum of (x - shift) and of its square over x[0..n): float32 through the
// build chosen for this CPU, other types through this file's.
template <class T, class C = ComputeType<T>>
NormSums shifted_sums(const T* x, int64_t n, C shift) {
  if constexpr (std::is_same_v<T, float>) {
    static const ShiftedSumsFn fast =
        simd_level() >= SimdLevel::Avx2 ? shifted_sums_f32_avx2 : shifted_sums_f32_scalar;
    return fast(x, n, shift);
  } else {
    return shifted_sums_impl(x, n, shift);
  }
}

// Sum of dy * w and of dy * w * (x - mean) over [0, n); w may be null (ones).
template <class T, class C = ComputeType<T>>
NormSums grad_sums(const T* dy, const T* x, const C* w, int64_t n, C mean) {
  if constexpr (std::is_same_v<T, float>) {
    static const GradSumsFn fast = simd_level() >= SimdLevel::Avx2 ? grad_sums_f32_avx2 : grad_sums_f32_scalar;
    return fast(dy, x, w, n, mean);
  } else {
    return grad_sums_impl(dy, x, w, n, mean);
  }
}

// Mean and M2 of x[0..n), contiguous, in two passes: deviations from the
// first value give an estimate of the mean, deviations from that estimate
// the result, with the estimate's error corrected exactly:
//   M2 = sum (x - shift)^2 - (sum (x - shift))^2 / n.
template <class T, class C = ComputeType<T>>
Moments row_moments(const T* x, int64_t n) {
  if (n == 0) return {};
  C first_shift = static_cast<C>(x[0]);
  NormSums estimate = shifted_sums(x, n, first_shift);
  C shift = static_cast<C>(first_shift + estimate.first / n);
  NormSums s = shifted_sums(x, n, shift);
  return {static_cast<double>(n), shift + s.first / n, std::max(0.0, s.second - s.first * s.first / n)};
}

// A (rows, width) row-major array summed down its columns. Threads take
// units of a block of rows by a chunk of columns; the cut depends on the
// shape alone.
struct ColumnLayout {
  int64_t rows, width;

  int64_t block_rows() const {
    return std::max({kMinBlockRows, (rows + kMaxRowBlocks - 1) / kMaxRowBlocks,
                     kGrain / std::max<int64_t>(1, width)});
  }
  int64_t row_blocks() const { return (rows + block_rows() - 1) / block_rows(); }
};

// Runs fn(block, row_begin, row_end, col_begin, col_end) over the units of
// `layout`, in parallel.
template <class Fn>
void for_each_column_unit(const ColumnLayout& layout, const Fn& fn) {
  if (layout.rows == 0 || layout.width == 0) return;
  int64_t chunks = (layout.width + kColumnChunk - 1) / kColumnChunk;
  int64_t rows = layout.block_rows();
  int64_t unit_elements = rows * std::min(layout.width, kColumnChunk);
  parallel_for(0, layout.row_blocks() * chunks, std::max<int64_t>(1, kGrain / unit_elements),
               [&](int64_t begin, int64_t end) {
                 for (int64_t u = begin; u < end; ++u) {
                   int64_t block = u / chunks, r0 = block * rows, j0 = (u % chunks) * kColumnChunk;
                   fn(block, r0, std::min(layout.rows, r0 + rows), j0, std::min(layout.width, j0 + kColumnChunk));
                 }
               });
}

}  // namespace
}  // namespace kiln::cpu
