// Debug mode: every rank checks that all ranks call the same collective.
//
// Note [Collective fingerprints]
// Collectives match by order alone: rank 0's 17th all_reduce meets rank 1's
// 17th collective, whatever that is. If rank 1 calls broadcast there, or
// all_reduce on a tensor of another shape, the backend hangs or silently
// mixes unrelated data. With KILN_DISTRIBUTED_DEBUG=1 (ProcessGroupOptions::debug)
// each rank first writes a fingerprint of its call — the collective, dtype,
// shape, reduce op and root — under "kiln/fingerprint/<sequence>/<rank>",
// waits for every rank's, and compares. A mismatch raises on every rank:
//
//   all_reduce #3 on group 'default': debug check failed: rank 0 calls
//   all_reduce(float32 [4, 4], sum) but rank 1 calls all_reduce(float32 [4, 5], sum)
//
// It costs a store round trip and a wait for the slowest rank per
// collective, which is why it is a debug mode (PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL does the same check). Keys are removed one
// collective later: once every rank has posted fingerprint N, every rank has
// finished reading N-1.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "distributed/store.h"

namespace kiln::distributed {

struct FingerprintMismatch {
  bool found = false;
  int other_rank = -1;
  std::string other_fingerprint;
};

// Posts this rank's fingerprint for collective `sequence`, waits (up to
// `timeout`) for the other ranks', and returns the first rank whose
// fingerprint differs. Throws the store's error if some rank never posts.
// While it waits it calls `check_peers` every `check_interval`, which throws
// to end the wait early (a dead or silent peer, Note [Heartbeat]).
FingerprintMismatch exchange_fingerprints(Store& store, int rank, int size, uint64_t sequence,
                                          const std::string& fingerprint, std::chrono::milliseconds timeout,
                                          std::chrono::milliseconds check_interval,
                                          const std::function<void()>& check_peers);

}  // namespace kiln::distributed
