// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011).
//
// Note [Random streams]
// A Generator is a 64-bit seed plus a 64-bit offset. Element i of a random
// tensor is computed from Philox(key = seed, counter = offset + i) alone, so
// any thread (or CUDA thread) can produce any element independently: the
// values depend on the seed and the order of calls, never on the thread
// count or the device. Each call advances the offset by the number of
// elements it drew, so consecutive calls give fresh numbers.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace kiln {

// One Philox4x32-10 block: 4 random 32-bit words for a 128-bit counter and a
// 64-bit key: philox::philox4x32_10 (tensor/philox.h), which kernels call
// directly.
struct Philox4x32 {
  static std::array<uint32_t, 4> block(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // The whole state is (seed, offset): saving and restoring it replays the
  // same numbers (training checkpoints, activation checkpointing).
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves `count` counter blocks and returns the first; thread safe.
  uint64_t advance(uint64_t count);

 private:
  std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when an op gets none.
Generator& default_generator();
// Reseeds the default generator (offset back to 0), as torch.manual_seed.
void manual_seed(uint64_t seed);

}  // namespace kiln
