// Sequential, random and distributed index orders (Note [Sampler epochs]).
#include "data/sampler.h"

#include <array>
#include <utility>

#include "tensor/error.h"
#include "tensor/random.h"

namespace kiln::data {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  KILN_CHECK(n >= 0, "random_permutation: n must be >= 0, got ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (n < 2) return order;
  // Fisher-Yates needs n - 1 draws; each Philox block gives two 64-bit words.
  // The generator only reserves the counters (Note [Random streams]), so the
  // draws depend on (seed, n) alone.
  Generator gen(seed);
  const uint64_t draws = static_cast<uint64_t>(n - 1);
  const uint64_t first = gen.advance((draws + 1) / 2);
  std::array<uint32_t, 4> block{};
  for (uint64_t k = 0; k < draws; ++k) {
    if (k % 2 == 0) block = Philox4x32::block(first + k / 2, 0, gen.seed());
    const uint64_t r = (static_cast<uint64_t>(block[2 * (k % 2) + 1]) << 32) | block[2 * (k % 2)];
    const uint64_t i = static_cast<uint64_t>(n - 1) - k;
    // j uniform in [0, i] by Lemire's multiply-shift: the high word of r * (i + 1).
    // Its bias is at most (i + 1) / 2^64, far below anything a test can see.
    const uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

SequentialSampler::SequentialSampler(int64_t size) : size_(size) {
  KILN_CHECK(size >= 0, "SequentialSampler: size must be >= 0, got ", size);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

RandomSampler::RandomSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {
  KILN_CHECK(size >= 0, "RandomSampler: size must be >= 0, got ", size);
}

std::vector<int64_t> RandomSampler::indices() const {
  return random_permutation(size_, seed_ + static_cast<uint64_t>(epoch()));
}

DistributedSampler::DistributedSampler(int64_t size, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  KILN_CHECK(size >= 0, "DistributedSampler: dataset size must be >= 0, got ", size);
  KILN_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  KILN_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: invalid rank ", rank,
             ", rank should be in the interval [0, ", num_replicas - 1, "] for num_replicas ", num_replicas);
  // torch: ceil((size - R) / R) with drop_last (= floor(size / R) when R does
  // not divide size), else ceil(size / R).
  if (drop_last_ && size % num_replicas != 0) {
    num_samples_ = size / num_replicas;
  } else {
    num_samples_ = (size + num_replicas - 1) / num_replicas;
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = random_permutation(dataset_size_, seed_ + static_cast<uint64_t>(epoch()));
  } else {
    order.resize(static_cast<size_t>(dataset_size_));
    for (int64_t i = 0; i < dataset_size_; ++i) order[static_cast<size_t>(i)] = i;
  }
  const size_t total = static_cast<size_t>(total_size());
  if (order.size() < total) {
    // Pad from the head, cycling when the padding is longer than the order
    // itself (torch's `(indices * ceil(padding / len))[:padding]`).
    const size_t n = order.size();
    for (size_t k = 0; order.size() < total; ++k) order.push_back(order[k % n]);
  } else {
    order.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t k = static_cast<size_t>(rank_); k < total; k += static_cast<size_t>(num_replicas_)) {
    mine.push_back(order[k]);
  }
  return mine;
}

}  // namespace kiln::data
