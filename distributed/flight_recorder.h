// The flight recorder: each process's last collectives, for error messages.
//
// Note [Flight recorder]
// When a collective fails or times out, the question is what this rank was
// doing just before: which collectives it issued, on which groups, and
// whether they finished. Each process keeps its last N (KILN_DISTRIBUTED_TRACE_SIZE,
// default 20) collectives and point-to-point operations in a ring buffer;
// the error a failed collective raises ends with that list, oldest first.
// PyTorch's NCCL flight recorder keeps the same kind of ring and dumps it on
// a timeout.
//
// An entry's state comes from its Work: completed, failed or timed out once
// somebody waited on it; otherwise asked of the backend's Work while that is
// alive ("running"), or "not waited" after its handle was dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/work.h"

namespace kiln::distributed {

enum class RecordState { Running, Completed, Failed, TimedOut };

class FlightRecorder {
 public:
  // The process's recorder.
  static FlightRecorder& instance();

  explicit FlightRecorder(size_t capacity);

  // Records an operation that has just been handed to a backend; returns the
  // id that set_state() takes. `sequence` is 0 for point-to-point operations.
  uint64_t record(const std::string& group, uint64_t sequence, const std::string& description,
                  const std::shared_ptr<Work>& work);
  // Updates an entry if it is still in the ring.
  void set_state(uint64_t id, RecordState state);

  // One line per entry, oldest first, e.g.
  //   "  #17 group 'default' all_reduce(float32 [1024], sum): completed after 1.2 ms"
  std::string dump() const;

  size_t capacity() const { return entries_.size(); }
  void clear();

 private:
  struct Entry {
    uint64_t id = 0;  // 0: empty slot
    std::string group;
    uint64_t sequence = 0;
    std::string description;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point finished;
    std::weak_ptr<Work> work;
    RecordState state = RecordState::Running;
    bool waited = false;
  };

  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  uint64_t next_id_ = 1;
};

}  // namespace kiln::distributed
