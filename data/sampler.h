// Samplers: the order in which a DataLoader visits a dataset's indices, one
// list per epoch, as torch.utils.data's samplers.
//
// Note [Sampler epochs]
// A sampler's order is a pure function of its settings and the epoch set by
// set_epoch(), never of how often indices() was called: a run restarted from
// a checkpoint at epoch e sees the same order as the uninterrupted run. The
// DataLoader calls set_epoch() at the start of every pass (Note [Loader
// epochs] in data/dataloader.h), so a sampler handed to a loader follows the
// loader's epoch.
//
// Shuffled orders come from random_permutation(n, seed + epoch), Kiln's own
// Philox stream: they are reproducible across runs, thread counts and
// machines, but are not the permutations torch.randperm would draw for the
// same seed (torch uses its Mersenne Twister). Everything a DistributedSampler
// does after the permutation (padding, truncation, subsampling) matches
// torch exactly, so without shuffling its indices equal torch's.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::data {

// A uniformly random permutation of [0, n): Fisher-Yates driven by a
// Generator seeded with `seed`. Deterministic in (n, seed).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

class Sampler {
 public:
  virtual ~Sampler() = default;

  // The number of indices one epoch yields.
  virtual int64_t size() const = 0;
  // The indices of the current epoch, in order.
  virtual std::vector<int64_t> indices() const = 0;

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 private:
  int64_t epoch_ = 0;
};

// 0, 1, ..., size - 1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size);

  int64_t size() const override { return size_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t size_;
};

// A fresh permutation of [0, size) per epoch: random_permutation(size, seed + epoch).
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t size, uint64_t seed = 0);

  int64_t size() const override { return size_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t size_;
  uint64_t seed_;
};

// The share of `rank` among `num_replicas` processes, as
// torch.utils.data.DistributedSampler:
//   1. order: random_permutation(size, seed + epoch) if shuffle, else 0..size-1;
//   2. total_size = ceil(size / num_replicas) * num_replicas; without
//      drop_last the order is padded to total_size by repeating it from its
//      head (several times over if size < the padding); with drop_last and
//      size % num_replicas != 0 it is cut to floor(size / num_replicas) *
//      num_replicas instead;
//   3. this rank takes order[rank], order[rank + num_replicas], ... (the
//      Python slice order[rank:total_size:num_replicas]).
// Every rank thus gets size() indices, and together the ranks cover the
// dataset (with a few repeats, or a few dropped with drop_last).
//   DistributedSampler sampler(50000, world_size, rank);
//   sampler.set_epoch(epoch);  // or let the DataLoader do it
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t size, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);

  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() const override;

  int64_t dataset_size() const { return dataset_size_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }
  // num_replicas * size(): the padded (or truncated) length split among ranks.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_size_;
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;  // indices per rank per epoch
};

}  // namespace kiln::data
