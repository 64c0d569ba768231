#include "distributed/work.h"

#include "distributed/store.h"
#include "tensor/error.h"

namespace kiln::distributed {

void Work::wait(std::optional<std::chrono::milliseconds> timeout) {
  const auto limit = timeout.value_or(kDefaultTimeout);
  KILN_CHECK(wait_for(limit), "Work::wait: the operation did not finish within ", limit.count(), " ms");
}

bool ThreadWork::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool ThreadWork::is_completed() {
  std::lock_guard lock(mutex_);
  return done_;
}

std::exception_ptr ThreadWork::exception() {
  std::lock_guard lock(mutex_);
  return error_;
}

void ThreadWork::finish() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_all();
}

void ThreadWork::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

}  // namespace kiln::distributed
