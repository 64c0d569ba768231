#include "distributed/collective_progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <vector>

#include "distributed/process_identity.h"

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
// The longest time between two heartbeats (Note [Heartbeat]), whatever the
// heartbeat timeout: a beat is one small store write.
constexpr std::chrono::milliseconds kMaxBeatInterval{2000};

// A rank's entry: "<sequence> <beat> <pid> <host> <pid namespace token> <description>".
struct Published {
  bool present = false;
  uint64_t sequence = 0;
  uint64_t beat = 0;
  int64_t pid = 0;
  std::string host;
  std::string token;
  std::string description;
  bool exact = false;  // from the backend, not the store
};

// `p` with what the backend knows exactly of the rank, if anything.
Published with_exact(Published p, int rank, const CollectiveProgress::ExactProgress& exact) {
  if (!exact) return p;
  if (const auto known = exact(rank)) {
    p.present = true;
    p.exact = true;
    p.sequence = known->first;
    p.description = known->second;
  }
  return p;
}

Published parse(const std::string& value) {
  Published p;
  std::istringstream in(value);
  if (!(in >> p.sequence >> p.beat >> p.pid >> p.host >> p.token)) return p;
  p.present = true;
  std::getline(in >> std::ws, p.description);
  return p;
}

std::string last_collective(const Published& p) {
  if (p.sequence == 0) return "it has entered no collective";
  return "its last collective was #" + std::to_string(p.sequence) + " " + p.description;
}

std::string seconds(std::chrono::steady_clock::duration d) {
  std::ostringstream os;
  os.precision(3);
  os << std::chrono::duration<double>(d).count() << " s";
  return os.str();
}

}  // namespace

CollectiveProgress::CollectiveProgress(const Store& store, int rank, int size,
                                       std::chrono::milliseconds heartbeat_timeout)
    : rank_(rank),
      size_(size),
      heartbeat_timeout_(heartbeat_timeout),
      beat_interval_(std::clamp(heartbeat_timeout / 5, kPublishInterval / 2, kMaxBeatInterval)),
      publisher_store_(store.clone()),
      report_store_(store.clone()),
      watch_store_(store.clone()) {
  const std::string host = host_name();
  const std::string token = pid_namespace_token();
  identity_ = std::to_string(::getpid()) + " " + (host.empty() ? "?" : host) + " " + (token.empty() ? "?" : token);
  entry_ = "0 ";
  entry_new_ = true;  // the first beat
  report_store_->set_timeout(kReportStoreTimeout);
  watch_store_->set_timeout(kReportStoreTimeout);
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
    entry_ = std::to_string(sequence) + " " + description;
    entry_sequence_ = sequence;
    entry_new_ = true;
    // While the publisher sits out its interval it will find the entry
    // when the interval ends; waking it would only cost a context switch.
    if (!publisher_idle_) return;
  }
  wake_.notify_one();
}

void CollectiveProgress::publish_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    // Wait for a new entry, but never longer than a beat.
    publisher_idle_ = true;
    wake_.wait_for(lock, beat_interval_, [&] { return stopping_ || entry_new_; });
    publisher_idle_ = false;
    if (stopping_ && !entry_new_) return;
    // entry_: "<sequence> <description>"; the beat and identity go between.
    const size_t space = entry_.find(' ');
    const std::string value = entry_.substr(0, space) + " " + std::to_string(++beat_) + " " + identity_ + " " +
                              (space == std::string::npos ? std::string() : entry_.substr(space + 1));
    const uint64_t sequence = entry_sequence_;
    entry_new_ = false;
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

std::optional<std::string> CollectiveProgress::silent_peer(const ExactProgress& exact) {
  std::lock_guard guard(watch_mutex_);
  const auto now = std::chrono::steady_clock::now();
  const std::string my_token = pid_namespace_token();
  try {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || !watch_store_->check({key(r)})) continue;
      const Published p = parse(watch_store_->get_string(key(r)));
      if (!p.present) continue;
      const std::string who =
          "rank " + std::to_string(r) + " (pid " + std::to_string(p.pid) + ", host " + p.host + ")";
      if (!my_token.empty() && p.token == my_token && !process_alive(p.pid)) {
        return who + " is no longer running; " + last_collective(with_exact(p, r, exact));
      }
      auto [watch, first_look] = watched_.try_emplace(r, Watch{p.beat, now});
      if (first_look || watch->second.beat != p.beat) {
        watch->second = Watch{p.beat, now};
        continue;
      }
      if (now - watch->second.since >= heartbeat_timeout_) {
        return who + " has not answered for " + seconds(now - watch->second.since) + " (heartbeat timeout " +
               seconds(heartbeat_timeout_) + ", Note [Heartbeat]); " + last_collective(with_exact(p, r, exact));
      }
    }
  } catch (const std::exception&) {
    // An unreadable store is not a silent peer; the collective's timeout decides.
  }
  return std::nullopt;
}

std::string CollectiveProgress::report(uint64_t sequence, const ExactProgress& exact) {
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
        if (r != rank_) ranks[r] = with_exact(ranks[r], r, exact);
        if (!ranks[r].exact && report_store_->check({key(r)})) ranks[r] = parse(report_store_->get_string(key(r)));
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
  bool may_lag = false;
  for (int r = 0; r < size_; ++r) {
    if (ranks[r].present && ranks[r].sequence >= sequence) {
      reached.push_back(r);
      continue;
    }
    may_lag = may_lag || !ranks[r].exact;
    behind << (behind.tellp() > 0 ? ", " : "") << "rank " << r;
    if (ranks[r].present && ranks[r].sequence > 0) {
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
    if (may_lag) {
      os << " (Progress as published: a rank that died or was stopped within 100 ms of its last collectives may "
            "have entered later ones.)";
    }
  } else {
    os << "Every rank reached it.";
  }
  return os.str();
}

}  // namespace kiln::distributed
