// The CUDA topk and multinomial kernels (launched by tensor/cuda/select.cu),
// written so that plain C++ can compile them too (Note [Emulated kernels] in
// tensor/cuda/conv_direct_kernels.cuh): besides thread and block indices
// and __syncthreads they use only the few intrinsics below, each with an
// emulated twin, so tests/tensor/cuda_select_emulation_test.cpp runs them
// on the CPU against the CPU backend on every machine.
//
// topk, for any k and n, one block per row, in three steps:
// - Radix select. Each entry becomes an unsigned key whose order is topk's
//   (larger key = better: NaN above every number, -0 as 0, all inverted
//   for smallest). Going down the key 8 bits at a time, the block counts
//   the entries whose higher bits match the prefix found so far, per value
//   of the next byte, and thread 0 picks the byte where the k-th best key
//   lies. After the last byte the prefix is the k-th best key itself, and
//   `ties` is how many entries equal to it belong to the top k.
// - Gather. Entries with a larger key take the first k - ties slots, in
//   any order (a shared counter). Entries equal to the k-th take the rest:
//   all of them the same way when all belong, else the first `ties` in
//   index order (a block-wide count per chunk of the row), so the lower
//   index wins ties.
// - Sort. A bitonic sort of the k chosen (key, index) pairs, padded to a
//   power of two, in a per-block scratch buffer in global memory: better
//   key first, then lower index, the CPU's order.
// multinomial: Note [Multinomial draws] (tensor/multinomial_draw.h), one
// block per row and one thread per segment: each thread validates and sums
// its segment, then thread 0 draws. A bad row is recorded through
// `problem.record(a, b, c)` (an ErrorSlot, Note [CUDA kernel errors]) and
// its samples are left unwritten.
#pragma once

#include <cstdint>

#include "tensor/multinomial_draw.h"

#ifdef KILN_CUDA_EMULATION
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#else
#include <cuda_runtime.h>

#include "tensor/cuda/dtype.cuh"
#endif

namespace kiln::cuda::select_kernels {

constexpr int kThreads = 256;  // per block; multinomial needs exactly multinomial_draw::kSegments
constexpr int kMaxWarps = kThreads / 32;

// ---- the intrinsics, and their emulated twins ----
#ifdef KILN_CUDA_EMULATION
// A kernel's shared variables: one struct in the emulated block's memory.
#define KILN_SELECT_SHARED(T, name) T& name = *static_cast<T*>(::kiln::emulation::shared_memory())
template <class T>
T to_compute(T v) {
  return v;
}
inline unsigned long long atomic_add(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
inline int atomic_exchange(int* p, int v) { return std::atomic_ref<int>(*p).exchange(v); }
inline uint32_t float_bits(float v) { return std::bit_cast<uint32_t>(v); }
inline uint64_t double_bits(double v) { return std::bit_cast<uint64_t>(v); }
inline bool is_inf(double v) { return std::isinf(v); }
inline int popcount(unsigned v) { return std::popcount(v); }
// __ballot_sync over a whole warp, through the emulation's per-lane slots.
inline unsigned ballot(bool flag) {
  emulation::Block& block = *emulation::running_block;
  const unsigned t = emulation::thread_index.x, first = t - t % emulation::kWarpLanes;
  block.lanes[t][0] = flag;
  emulation::sync_warp();
  unsigned mask = 0;
  for (unsigned lane = 0; lane < emulation::kWarpLanes; ++lane) mask |= unsigned{block.lanes[first + lane][0]} << lane;
  emulation::sync_warp();
  return mask;
}
#else
#define KILN_SELECT_SHARED(T, name) __shared__ T name
__device__ inline unsigned long long atomic_add(unsigned long long* p, unsigned long long v) { return atomicAdd(p, v); }
__device__ inline int atomic_exchange(int* p, int v) { return atomicExch(p, v); }
__device__ inline uint32_t float_bits(float v) { return __float_as_uint(v); }
__device__ inline uint64_t double_bits(double v) { return static_cast<uint64_t>(__double_as_longlong(v)); }
__device__ inline bool is_inf(double v) { return isinf(v); }
__device__ inline int popcount(unsigned v) { return __popc(v); }
__device__ inline unsigned ballot(bool flag) { return __ballot_sync(0xffffffffu, flag); }
#endif

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- topk ----

// Unsigned bits in the order of the values: NaN (any payload) above +inf,
// -0 as +0.
__device__ inline uint32_t ordered_bits(float v) {
  if (v != v) return 0xFFFFFFFFu;
  if (v == 0.0f) return 0x80000000u;
  const uint32_t b = float_bits(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ inline uint64_t ordered_bits(double v) {
  if (v != v) return ~0ull;
  if (v == 0.0) return 1ull << 63;
  const uint64_t b = double_bits(v);
  return (b & (1ull << 63)) ? ~b : (b | (1ull << 63));
}
__device__ inline uint64_t ordered_bits(int64_t v) { return static_cast<uint64_t>(v) ^ (1ull << 63); }
__device__ inline uint32_t ordered_bits(int32_t v) { return static_cast<uint32_t>(v) ^ 0x80000000u; }
__device__ inline uint32_t ordered_bits(int8_t v) { return ordered_bits(static_cast<int32_t>(v)); }
__device__ inline uint32_t ordered_bits(uint8_t v) { return v; }

// The key type of stored type D: 32 bits, or 64 for double and int64.
template <class D>
using KeyOf = decltype(ordered_bits(to_compute(D{})));

// topk's key of a stored value: larger is better (NaN's all-ones key
// inverts to 0, the worst, for smallest).
template <class D>
__device__ inline KeyOf<D> topk_key(D v, bool largest) {
  const KeyOf<D> bits = ordered_bits(to_compute(v));
  return largest ? bits : static_cast<KeyOf<D>>(~bits);
}

struct TopKShared {
  unsigned long long histogram[256];
  unsigned long long better_count, equal_count;
  int64_t ties;
  unsigned digit;
  int warp_counts[kMaxWarps];
};

// How many threads before this one have `flag` set, and the block's total
// (blockDim.x a multiple of 32, at most kThreads).
__device__ inline int64_t block_exclusive_count(bool flag, int64_t& total, int* warp_counts) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const unsigned mask = ballot(flag);
  if (lane == 0) warp_counts[warp] = popcount(mask);
  __syncthreads();
  int64_t before = popcount(mask & ((1u << lane) - 1u));
  total = 0;
  for (int w = 0; w < warps; ++w) {
    if (w < warp) before += warp_counts[w];
    total += warp_counts[w];
  }
  __syncthreads();  // warp_counts is rewritten by the next call
  return before;
}

// in: (rows, n); values, indices: (rows, k), 1 <= k <= n; keys, slots:
// (gridDim.x, padded), each block's scratch, padded = the power of two >= k.
template <class D>
__global__ void topk_kernel(D* values, int64_t* indices, const D* in, int64_t rows, int64_t n, int64_t k, bool largest,
                            KeyOf<D>* keys_scratch, int64_t* slots_scratch, int64_t padded) {
  using K = KeyOf<D>;
  KILN_SELECT_SHARED(TopKShared, shared);
  K* keys = keys_scratch + blockIdx.x * padded;
  int64_t* slots = slots_scratch + blockIdx.x * padded;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const D* x = in + row * n;
    // Radix select of the k-th best key.
    K prefix = 0, mask = 0;
    int64_t ties = k;  // how many of the entries matching the prefix belong to the top k
    for (int shift = static_cast<int>(sizeof(K) * 8) - 8; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += blockDim.x) shared.histogram[b] = 0;
      __syncthreads();
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const K key = topk_key(x[i], largest);
        if ((key & mask) == prefix) atomic_add(&shared.histogram[(key >> shift) & 0xFF], 1ull);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned long long above = 0;
        int d = 255;
        for (; d > 0 && above + shared.histogram[d] < static_cast<unsigned long long>(ties); --d) {
          above += shared.histogram[d];
        }
        shared.digit = static_cast<unsigned>(d);
        shared.ties = ties - static_cast<int64_t>(above);
        shared.equal_count = shared.histogram[d];
        shared.better_count = 0;
      }
      __syncthreads();
      prefix |= static_cast<K>(shared.digit) << shift;
      mask |= static_cast<K>(0xFF) << shift;
      ties = shared.ties;
    }
    const K kth = prefix;
    const int64_t first_tie = k - ties;
    const bool all_equal_belong = static_cast<unsigned long long>(ties) == shared.equal_count;
    // Gather the better entries (and, when they all belong, the equal ones) in any order.
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const K key = topk_key(x[i], largest);
      if (key > kth || (all_equal_belong && key == kth)) {
        const auto slot = static_cast<int64_t>(atomic_add(&shared.better_count, 1ull));
        keys[slot] = key;
        slots[slot] = i;
      }
    }
    if (!all_equal_belong) {
      // The first `ties` equal entries by index, chunk by chunk.
      int64_t taken = 0;  // the same in every thread
      for (int64_t base = 0; base < n && taken < ties; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        const bool equal = i < n && topk_key(x[i], largest) == kth;
        int64_t chunk_total;
        const int64_t before = block_exclusive_count(equal, chunk_total, shared.warp_counts);
        if (equal && taken + before < ties) {
          keys[first_tie + taken + before] = kth;
          slots[first_tie + taken + before] = i;
        }
        taken += chunk_total;
      }
    }
    // Padding that sorts last: the smallest key and an index past every entry.
    for (int64_t j = k + threadIdx.x; j < padded; j += blockDim.x) {
      keys[j] = 0;
      slots[j] = INT64_MAX;
    }
    __syncthreads();
    // Bitonic sort into topk's order: better key first, then lower index.
    for (int64_t size = 2; size <= padded; size <<= 1) {
      for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
        for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) {
          const int64_t j = i ^ stride;
          if (j <= i) continue;
          const K ki = keys[i], kj = keys[j];
          const int64_t si = slots[i], sj = slots[j];
          const bool j_first = kj > ki || (kj == ki && sj < si);
          const bool i_first = ki > kj || (ki == kj && si < sj);
          if ((i & size) == 0 ? j_first : i_first) {
            keys[i] = kj;
            keys[j] = ki;
            slots[i] = sj;
            slots[j] = si;
          }
        }
        __syncthreads();
      }
    }
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
      const int64_t i = slots[j];
      values[row * k + j] = x[i];  // the entry itself: NaN payloads and -0 come through
      indices[row * k + j] = i;
    }
    __syncthreads();  // the scratch and the shared counters are reused by the next row
  }
}

// ---- multinomial ----

struct MultinomialShared {
  double sums[multinomial_draw::kSegments];
  double starts[multinomial_draw::kSegments + 1];
  int64_t positives[multinomial_draw::kSegments];
  int row_is_bad;
};

// probs: (rows, n); out: (rows, num_samples); left_scratch: (gridDim.x, n),
// each block's weights not drawn yet, or null with replacement. blockDim.x
// is multinomial_draw::kSegments: thread s owns segment s.
template <class D, class Problem>
__global__ void multinomial_kernel(int64_t* out, const D* probs, double* left_scratch, int64_t rows, int64_t n,
                                   int64_t num_samples, bool replacement, uint64_t seed, uint64_t offset,
                                   Problem problem) {
  using multinomial_draw::kSegments;
  namespace draw = multinomial_draw;
  KILN_SELECT_SHARED(MultinomialShared, shared);
  const int s = static_cast<int>(threadIdx.x);
  const int64_t len = draw::segment_length(n);
  double* left = replacement ? nullptr : left_scratch + blockIdx.x * n;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const D* p = probs + row * n;
    auto weight = [p](int64_t i) { return static_cast<double>(to_compute(p[i])); };
    if (s == 0) shared.row_is_bad = 0;
    __syncthreads();
    const int64_t begin = min64(n, s * len), end = min64(n, begin + len);
    int64_t positive = 0;
    bool ok = true;
    for (int64_t i = begin; i < end; ++i) {
      const double w = weight(i);
      if (!(w >= 0.0) || is_inf(w)) {
        if (atomic_exchange(&shared.row_is_bad, 1) == 0) {
          const draw::Encoded e = draw::encode_bad_entry(row, i, w);
          problem.record(e.a, e.b, e.c);
        }
        ok = false;
        break;
      }
      positive += w > 0.0;
      if (left != nullptr) left[i] = w;
    }
    shared.sums[s] = ok ? draw::segment_sum(weight, begin, end) : 0.0;
    shared.positives[s] = positive;
    __syncthreads();
    if (s == 0 && shared.row_is_bad == 0) {
      double* sums = shared.sums;
      double* starts = shared.starts;
      draw::segment_starts(sums, starts);
      const double total = starts[kSegments];
      int64_t row_positive = 0;
      for (int t = 0; t < kSegments; ++t) row_positive += shared.positives[t];
      int64_t* samples = out + row * num_samples;
      if (!(total > 0.0) || is_inf(total)) {
        const draw::Encoded e = draw::encode_bad_total(row, total);
        problem.record(e.a, e.b, e.c);
      } else if (replacement) {
        for (int64_t j = 0; j < num_samples; ++j) {
          samples[j] = draw::draw(weight, n, starts, draw::uniform(seed, offset, row, num_samples, j));
        }
      } else if (row_positive < num_samples) {
        const draw::Encoded e = draw::encode_too_few_positive(row, row_positive, num_samples);
        problem.record(e.a, e.b, e.c);
      } else {
        auto left_weight = [left](int64_t i) { return left[i]; };
        for (int64_t j = 0; j < num_samples; ++j) {
          const int64_t i = draw::draw(left_weight, n, starts, draw::uniform(seed, offset, row, num_samples, j));
          samples[j] = i;
          left[i] = 0.0;
          const int t = static_cast<int>(i / len);
          sums[t] = draw::segment_sum(left_weight, t * len, min64(n, (t + 1) * len));
          draw::segment_starts(sums, starts, t);
        }
      }
    }
    __syncthreads();  // the shared sums and the scratch row are reused by the next row
  }
}

}  // namespace kiln::cuda::select_kernels
