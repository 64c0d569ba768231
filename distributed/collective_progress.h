// Which collective each rank of a group has reached, and whether it is still
// answering, published to the store.
//
// Note [Collective progress]
// A hung collective looks the same on every rank that reached it: a wait that
// never ends. What tells the story is the rank that did not reach it — dead,
// stuck in a data loader, or calling a different collective. So every rank
// publishes the last collective it entered under "kiln/progress/<rank>" in
// the group's store, and a rank whose collective fails or times out reads
// every rank's entry and names who has and has not reached it:
//
//   all_reduce #17 (float32 [1024], sum) on group 'default' (gloo, rank 0 of 3) did not
//   finish within 5000 ms. Ranks that reached #17: 0, 1. Not reached: rank 2 (last
//   entered #16 all_reduce(float32 [10], sum)).
//
// Publishing must not slow collectives down, so entered() only stores the
// entry and wakes a publisher thread, which writes the newest entry through
// its own store client (Store::clone()), at most once every 100 ms: a burst
// of collectives costs one store write, and a training step of small
// collectives does not pay a store round trip for each. A rank whose
// collective waits longer than that has its entry written by then, so "last
// entered" is exact for a rank that is stuck, hung or waiting; for one that
// died or was stopped within 100 ms of its last collectives it may name one
// entered up to 100 ms earlier. Where the backend knows each rank's last
// call exactly (Gloo does, from the calls its ranks exchange: Note
// [Always-on collective agreement]), that is used instead; otherwise the
// report says that the entry may lag. The report waits
// briefly (up to a second) for the ranks that are still behind, because
// their publisher may not have written yet.
//
// Note [Heartbeat]
// A rank that stops answering without dying — stopped by SIGSTOP, swapped
// out, hung in a driver call — closes no connection and leaves its pid
// alive, so its peers would wait for the whole collective timeout (5
// minutes by default), which must stay long for ranks that are slow but
// working (a long evaluation, a first cuDNN autotune). So the publisher
// thread is also a heartbeat: it rewrites its entry at least every
// heartbeat_timeout / 5 (at most every 2 s) with a beat counter, its pid and
// host. A rank that has waited in a collective for longer than one such
// interval reads its peers' entries between waits; a peer whose beat has
// not moved for heartbeat_timeout is named at once:
//
//   rank 1 (pid 4242, host node1) has not answered for 10 s; its last
//   collective was #463 all_reduce(float32 [61706], sum)
//
// The beat is compared with itself, not with a clock, so the hosts' clocks
// need not agree. A peer on this host (the same boot and PID namespace) is
// also checked by its pid, which finds a dead peer within one interval even
// where no connection breaks (debug mode's store waits). A stopped process
// stops every thread, its heartbeat included; a live one beats even while
// its main thread computes, so only silence is named.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "distributed/store.h"

namespace kiln::distributed {

class CollectiveProgress {
 public:
  // `store` is the group's store; the publisher thread, report() and
  // silent_peer() use clones of it.
  CollectiveProgress(const Store& store, int rank, int size, std::chrono::milliseconds heartbeat_timeout);
  ~CollectiveProgress();
  CollectiveProgress(const CollectiveProgress&) = delete;
  CollectiveProgress& operator=(const CollectiveProgress&) = delete;

  // Called as collective `sequence` starts; never blocks on the store.
  void entered(uint64_t sequence, const std::string& description);

  // What a backend knows exactly of another rank's last collective
  // (sequence, description; sequence 0 for none), which then overrides what
  // that rank published; nothing where the backend does not know.
  using ExactProgress = std::function<std::optional<std::pair<uint64_t, std::string>>(int rank)>;

  // "Ranks that reached #N: ... Not reached: ..." for collective `sequence`,
  // or a sentence saying why the store could not be read.
  std::string report(uint64_t sequence, const ExactProgress& exact);

  // How often a waiting rank should call silent_peer().
  std::chrono::milliseconds check_interval() const { return beat_interval_; }

  // "rank 1 (pid 4242, host node1) has not answered for 10 s; its last
  // collective was #463 ..." for the first peer whose heartbeat has not
  // moved for the heartbeat timeout since this rank first looked, or that
  // is known dead; nothing otherwise (also when the store cannot be read:
  // the collective's own timeout then decides).
  std::optional<std::string> silent_peer(const ExactProgress& exact);

  static std::string key(int rank) { return "kiln/progress/" + std::to_string(rank); }

 private:
  void publish_loop();

  int rank_;
  int size_;
  std::chrono::milliseconds heartbeat_timeout_;
  std::chrono::milliseconds beat_interval_;
  std::string identity_;  // "<pid> <host> <pid namespace token>", written with every beat
  std::unique_ptr<Store> publisher_store_;
  std::unique_ptr<Store> report_store_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::string entry_;                  // "<sequence> <description>" of the newest collective
  uint64_t entry_sequence_ = 0;
  bool entry_new_ = false;             // entry_ not written yet
  uint64_t beat_ = 0;
  uint64_t published_sequence_ = 0;
  bool flush_ = false;                 // report() wants the newest entry written now
  bool publisher_idle_ = false;        // the publisher waits for an entry (not out its interval)
  std::string publish_error_;          // why publishing stopped, if it did
  bool stopping_ = false;
  std::condition_variable published_;
  std::thread publisher_;

  // What silent_peer() has seen of each peer: its beat and since when.
  struct Watch {
    uint64_t beat = 0;
    std::chrono::steady_clock::time_point since;
  };
  std::mutex watch_mutex_;
  std::unique_ptr<Store> watch_store_;
  std::map<int, Watch> watched_;
};

}  // namespace kiln::distributed
