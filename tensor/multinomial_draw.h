// The arithmetic of one multinomial draw, shared by the CPU
// (tensor/cpu/select.cpp) and CUDA (tensor/cuda/select.cu) kernels so that
// both give the same samples for the same seed and offset.
//
// Note [Multinomial draws]
// A draw picks index i of a row w[0..n) with probability w[i] / sum(w): a
// uniform u in [0, 1), the target u * sum, and the first i whose running
// sum w[0] + ... + w[i] passes the target. Two devices agree on i only if
// they add the same doubles in the same order, so the order is fixed here,
// in a form a CUDA block computes quickly:
// - The entries are read as doubles (exact for every floating dtype) and the
//   row is cut into kSegments segments of ceil(n / kSegments) entries (the
//   last ones short or empty). sums[s] is segment s's sum, left to right;
//   starts[s] = sums[0] + ... + sums[s - 1], left to right, and
//   starts[kSegments] is the row's total. On CUDA thread s of the row's
//   block sums segment s; the rest is one thread's work.
// - A draw finds the first segment s with starts[s + 1] > target (so
//   starts[s] <= target), then runs starts[s] + w[begin] + ... through the
//   segment until it passes the target. Zero entries are skipped, so they
//   are never drawn. Rounding may leave the run short of the target (the
//   run and starts[s + 1] add in different orders), or put the target at
//   the total; the draw then takes the last positive entry of that segment
//   (of the last segment with weight): an error of an ulp in probability,
//   never an entry of weight zero.
// - Without replacement the drawn entry is set to zero in a copy of the
//   row, its segment re-summed and the starts after it recomputed, exactly
//   as if everything had been summed afresh, so each draw is proportional
//   to what is left.
// - The uniform of draw j of row r comes from Philox block
//   offset + r * num_samples + j (Note [Random streams] in tensor/random.h),
//   its first two words as 53 bits (philox::uniform53): it depends on
//   neither thread nor device, and a call uses rows * num_samples blocks.
// Each row is validated before it is drawn from: an entry negative,
// infinite or NaN, a total that is zero or not finite, or (without
// replacement) fewer positive entries than draws is an error, whose
// details the kernels encode as three integers (encode_* below) for
// error_message, which the CPU throws directly and CUDA reports through
// Note [CUDA kernel errors].
#pragma once

#include <cstdint>
#include <string>

#include "tensor/host_device.h"
#include "tensor/philox.h"

namespace kiln::multinomial_draw {

// Segments per row: one per thread of the CUDA kernel's block.
inline constexpr int kSegments = 256;

// Entries per segment: segment s holds [s * len, min(n, (s + 1) * len)).
KILN_HOST_DEVICE inline int64_t segment_length(int64_t n) { return (n + kSegments - 1) / kSegments; }

// The sum of weight(begin) .. weight(end - 1), left to right.
template <class Weight>
KILN_HOST_DEVICE double segment_sum(const Weight& weight, int64_t begin, int64_t end) {
  double sum = 0.0;
  for (int64_t i = begin; i < end; ++i) sum += weight(i);
  return sum;
}

// starts[s + 1] = starts[s] + sums[s] for s >= first; starts[0..first] are
// kept (starts[0] is 0).
KILN_HOST_DEVICE inline void segment_starts(const double* sums, double* starts, int first = 0) {
  if (first == 0) starts[0] = 0.0;
  for (int s = first; s < kSegments; ++s) starts[s + 1] = starts[s] + sums[s];
}

// The uniform of draw `sample` of row `row`.
KILN_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t offset, int64_t row, int64_t num_samples,
                                       int64_t sample) {
  const philox::Block b = philox::element_block(
      seed, offset, static_cast<uint64_t>(row) * static_cast<uint64_t>(num_samples) + static_cast<uint64_t>(sample));
  return philox::uniform53(b.w[0], b.w[1]);
}

// The index drawn for uniform u from a row of n entries whose segment
// starts are `starts` (total > 0 and finite).
template <class Weight>
KILN_HOST_DEVICE int64_t draw(const Weight& weight, int64_t n, const double* starts, double u) {
  const double total = starts[kSegments];
  const double target = philox::detail::mul(u, total);  // one rounding on both devices
  int s = 0;
  while (s < kSegments && !(starts[s + 1] > target)) ++s;
  if (s == kSegments) {
    // The target rounded up to the total: the last segment with weight.
    s = kSegments - 1;
    while (s > 0 && !(starts[s + 1] > starts[s])) --s;
  }
  const int64_t len = segment_length(n);
  const int64_t begin = s * len, end = begin + len < n ? begin + len : n;
  double running = starts[s];
  int64_t last_positive = -1;
  for (int64_t i = begin; i < end; ++i) {
    const double w = weight(i);
    if (!(w > 0.0)) continue;
    last_positive = i;
    running += w;
    if (running > target) return i;
  }
  return last_positive;
}

// ---- errors: three integers a kernel can record (Note [CUDA kernel errors]) ----

enum Problem : int64_t { kBadEntry = 1, kBadTotal = 2, kTooFewPositive = 3 };

struct Encoded {
  int64_t a, b, c;
};
// Entry `index` of `row` is negative, infinite or NaN.
KILN_HOST_DEVICE inline Encoded encode_bad_entry(int64_t row, int64_t index, double value) {
  return {index * 4 + kBadEntry, row, static_cast<int64_t>(philox::detail::bits_of(value))};
}
// The row sums to zero or to something not finite.
KILN_HOST_DEVICE inline Encoded encode_bad_total(int64_t row, double total) {
  return {kBadTotal, row, static_cast<int64_t>(philox::detail::bits_of(total))};
}
// Without replacement, the row has `positive` positive entries for `num_samples` draws.
KILN_HOST_DEVICE inline Encoded encode_too_few_positive(int64_t row, int64_t positive, int64_t num_samples) {
  return {positive * 4 + kTooFewPositive, row, num_samples};
}

// The message for an encoded problem, naming multinomial, the row and the
// values (tensor/select.cpp).
std::string error_message(int64_t a, int64_t b, int64_t c);

}  // namespace kiln::multinomial_draw
