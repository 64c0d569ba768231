#include "distributed/flight_recorder.h"

#include <cstdlib>
#include <sstream>

namespace kiln::distributed {
namespace {

size_t capacity_from_env() {
  constexpr size_t kDefault = 20;
  const char* text = std::getenv("KILN_DISTRIBUTED_TRACE_SIZE");
  if (!text || !*text) return kDefault;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  // A bad value must not stop training; the default is a fine answer.
  return (*end == '\0' && value > 0 && value <= 100000) ? static_cast<size_t>(value) : kDefault;
}

double milliseconds_between(std::chrono::steady_clock::time_point a,
                            std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder recorder(capacity_from_env());
  return recorder;
}

FlightRecorder::FlightRecorder(size_t capacity) : entries_(capacity == 0 ? 1 : capacity) {}

uint64_t FlightRecorder::record(const std::string& group, uint64_t sequence,
                                const std::string& description, const std::shared_ptr<Work>& work) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  Entry& e = entries_[id % entries_.size()];
  e = Entry{};
  e.id = id;
  e.group = group;
  e.sequence = sequence;
  e.description = description;
  e.started = std::chrono::steady_clock::now();
  e.work = work;
  return id;
}

void FlightRecorder::set_state(uint64_t id, RecordState state) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_[id % entries_.size()];
  if (e.id != id || e.waited) return;
  e.state = state;
  e.waited = true;
  e.finished = std::chrono::steady_clock::now();
}

std::string FlightRecorder::dump() const {
  std::lock_guard lock(mutex_);
  std::ostringstream os;
  const auto now = std::chrono::steady_clock::now();
  const uint64_t first = next_id_ > entries_.size() ? next_id_ - entries_.size() : 1;
  for (uint64_t id = first; id < next_id_; ++id) {
    const Entry& e = entries_[id % entries_.size()];
    if (e.id != id) continue;
    os << "  ";
    if (e.sequence) {
      os << '#' << e.sequence << ' ';
    } else {
      os << "p2p ";
    }
    os << "group '" << e.group << "' " << e.description << ": ";
    if (e.waited) {
      static const char* names[] = {"running", "completed", "failed", "timed out"};
      os << names[static_cast<int>(e.state)] << " after " << milliseconds_between(e.started, e.finished)
         << " ms";
    } else if (auto work = e.work.lock()) {
      // Asking the backend is safe under our lock: Work never calls back here.
      if (!work->is_completed()) {
        os << "running for " << milliseconds_between(e.started, now) << " ms";
      } else {
        os << (work->exception() ? "failed" : "completed") << " (not waited on yet)";
      }
    } else {
      os << "handle dropped without wait()";
    }
    os << '\n';
  }
  return os.str();
}

void FlightRecorder::clear() {
  std::lock_guard lock(mutex_);
  for (Entry& e : entries_) e = Entry{};
}

}  // namespace kiln::distributed
