#include "distributed/collective_fingerprint.h"

#include <algorithm>
#include <vector>

namespace kiln::distributed {
namespace {

std::string key(uint64_t sequence, int rank) {
  return "kiln/fingerprint/" + std::to_string(sequence) + "/" + std::to_string(rank);
}

}  // namespace

FingerprintMismatch exchange_fingerprints(Store& store, int rank, int size, uint64_t sequence,
                                          const std::string& fingerprint, std::chrono::milliseconds timeout,
                                          std::chrono::milliseconds check_interval,
                                          const std::function<void()>& check_peers) {
  store.set(key(sequence, rank), fingerprint);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(sequence, r));
  // In slices, so that a dead peer is found within one, not at the timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      store.wait(keys, std::clamp(left, std::chrono::milliseconds(1), check_interval));
      break;
    } catch (const std::exception&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
    }
    check_peers();
  }
  if (sequence > 1) store.delete_key(key(sequence - 1, rank));

  FingerprintMismatch mismatch;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    std::string theirs = store.get_string(keys[r]);
    if (theirs != fingerprint) {
      mismatch.found = true;
      mismatch.other_rank = r;
      mismatch.other_fingerprint = std::move(theirs);
      break;
    }
  }
  return mismatch;
}

}  // namespace kiln::distributed
