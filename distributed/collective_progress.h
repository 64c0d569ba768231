// Which collective each rank of a group has reached, published to the store.
//
// Note [Collective progress]
// A hung collective looks the same on every rank that reached it: a wait that
// never ends. What tells the story is the rank that did not reach it — dead,
// stuck in a data loader, or calling a different collective. So every rank
// publishes the last collective it entered under "kiln/progress/<rank>" in
// the group's store ("<sequence> <description>"), and a rank whose
// collective fails or times out reads every rank's entry and names who has
// and has not reached it:
//
//   all_reduce #17 (float32 [1024], sum) on group 'default' (gloo, rank 0 of 3) did not
//   finish within 5000 ms. Ranks that reached #17: 0, 1. Not reached: rank 2 (last
//   entered #16 all_reduce(float32 [10], sum)).
//
// Publishing must not slow collectives down, so entered() only stores the
// entry and wakes a publisher thread, which writes the newest entry through
// its own store client (Store::clone()), at most once every 100 ms: a burst
// of collectives costs one store write, and a training step of small
// collectives does not pay a store round trip for each. The report waits briefly (up to a second) for the ranks that
// are still behind, because their publisher may not have written yet.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/store.h"

namespace kiln::distributed {

class CollectiveProgress {
 public:
  // `store` is the group's store; the publisher thread and report() use clones.
  CollectiveProgress(const Store& store, int rank, int size);
  ~CollectiveProgress();
  CollectiveProgress(const CollectiveProgress&) = delete;
  CollectiveProgress& operator=(const CollectiveProgress&) = delete;

  // Called as collective `sequence` starts; never blocks on the store.
  void entered(uint64_t sequence, const std::string& description);

  // "Ranks that reached #N: ... Not reached: ..." for collective `sequence`,
  // or a sentence saying why the store could not be read.
  std::string report(uint64_t sequence);

  static std::string key(int rank) { return "kiln/progress/" + std::to_string(rank); }

 private:
  void publish_loop();

  int rank_;
  int size_;
  std::unique_ptr<Store> publisher_store_;
  std::unique_ptr<Store> report_store_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::string pending_;     // newest entry not written yet ("" when none)
  uint64_t pending_sequence_ = 0;
  uint64_t published_sequence_ = 0;
  bool flush_ = false;           // report() wants the newest entry written now
  bool publisher_idle_ = false;  // the publisher waits for an entry (not out its interval)
  std::string publish_error_;  // why publishing stopped, if it did
  bool stopping_ = false;
  std::condition_variable published_;
  std::thread publisher_;
};

}  // namespace kiln::distributed
