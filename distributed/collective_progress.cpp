#include "distributed/collective_progress.h"

#include <chrono>
#include <sstream>
#include <vector>

namespace kiln::distributed {
namespace {

// The report must come out even when the store is slow or gone.
constexpr std::chrono::milliseconds kReportStoreTimeout{2000};
// How long the report waits for lagging ranks' publishers.
constexpr std::chrono::milliseconds kReportGrace{1000};
// The publisher writes at most once per interval. A store write is a round
// trip to rank 0's server thread (or a locked file append): paid once per
// collective, it cost small all_reduces on two cores up to 3x their time.
// The interval must stay well below kReportGrace, so that a report still
// sees every rank's newest entry.
constexpr std::chrono::milliseconds kPublishInterval{100};

struct Published {
  bool present = false;
  uint64_t sequence = 0;
  std::string description;
};

Published parse(const std::string& value) {
  Published p;
  const auto space = value.find(' ');
  try {
    p.sequence = std::stoull(value.substr(0, space));
    p.present = true;
  } catch (const std::exception&) {
    return p;
  }
  if (space != std::string::npos) p.description = value.substr(space + 1);
  return p;
}

}  // namespace

CollectiveProgress::CollectiveProgress(const Store& store, int rank, int size)
    : rank_(rank), size_(size), publisher_store_(store.clone()), report_store_(store.clone()) {
  report_store_->set_timeout(kReportStoreTimeout);
  publisher_ = std::thread([this] { publish_loop(); });
}

CollectiveProgress::~CollectiveProgress() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  publisher_.join();
}

void CollectiveProgress::entered(uint64_t sequence, const std::string& description) {
  {
    std::lock_guard lock(mutex_);
    pending_ = std::to_string(sequence) + " " + description;
    pending_sequence_ = sequence;
    // While the publisher sits out its interval it will find the entry
    // when the interval ends; waking it would only cost a context switch.
    if (!publisher_idle_) return;
  }
  wake_.notify_one();
}

void CollectiveProgress::publish_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    publisher_idle_ = true;
    wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    publisher_idle_ = false;
    if (pending_.empty()) return;  // stopping, nothing left to write
    const std::string value = std::move(pending_);
    const uint64_t sequence = pending_sequence_;
    pending_.clear();
    lock.unlock();
    std::string error;
    try {
      publisher_store_->set(key(rank_), value);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty()) {
      // The store is gone (its host died, or the job is ending): stop
      // publishing and say so in reports instead of failing collectives.
      publish_error_ = error;
      published_.notify_all();
      return;
    }
    published_sequence_ = sequence;
    published_.notify_all();
    wake_.wait_for(lock, kPublishInterval, [&] { return stopping_ || flush_; });
    flush_ = false;
  }
}

std::string CollectiveProgress::report(uint64_t sequence) {
  std::ostringstream os;
  {
    // Our own entry first, so that peers reporting at the same moment see it.
    std::unique_lock lock(mutex_);
    flush_ = true;
    wake_.notify_one();
    published_.wait_for(lock, kReportGrace, [&] {
      return published_sequence_ >= sequence || !publish_error_.empty();
    });
    if (!publish_error_.empty()) {
      os << "This rank could not publish its progress to the store (" << publish_error_ << "). ";
    }
  }
  std::vector<Published> ranks(size_);
  const auto deadline = std::chrono::steady_clock::now() + kReportGrace;
  try {
    while (true) {
      bool all_reached = true;
      for (int r = 0; r < size_; ++r) {
        if (ranks[r].present && ranks[r].sequence >= sequence) continue;
        if (report_store_->check({key(r)})) ranks[r] = parse(report_store_->get_string(key(r)));
        all_reached = all_reached && ranks[r].present && ranks[r].sequence >= sequence;
      }
      if (all_reached || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    os << "The other ranks' progress could not be read from the store: " << e.what();
    return os.str();
  }
  std::vector<int> reached;
  std::ostringstream behind;
  for (int r = 0; r < size_; ++r) {
    if (ranks[r].present && ranks[r].sequence >= sequence) {
      reached.push_back(r);
      continue;
    }
    behind << (behind.tellp() > 0 ? ", " : "") << "rank " << r;
    if (ranks[r].present) {
      behind << " (last entered #" << ranks[r].sequence << ' ' << ranks[r].description << ')';
    } else {
      behind << " (entered no collective)";
    }
  }
  os << "Ranks that reached #" << sequence << ": ";
  if (reached.empty()) os << "none";
  for (size_t i = 0; i < reached.size(); ++i) os << (i ? ", " : "") << reached[i];
  os << ". ";
  if (behind.tellp() > 0) {
    os << "Not reached: " << behind.str() << '.';
  } else {
    os << "Every rank reached it.";
  }
  return os.str();
}

}  // namespace kiln::distributed
