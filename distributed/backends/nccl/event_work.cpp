// The Work of an NCCL operation (event_work.h).
#include "distributed/backends/nccl/event_work.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "distributed/backends/nccl/communicator.h"
#include "tensor/error.h"

namespace kiln::distributed::nccl {

namespace {

// The first polls come quickly, for small collectives that finish in
// microseconds; long waits back off so as not to spin a core.
constexpr auto kFirstPause = std::chrono::microseconds(10);
constexpr auto kLongestPause = std::chrono::milliseconds(1);

}  // namespace

EventWork::EventWork(std::string what, std::shared_ptr<Communicator> comm, std::shared_ptr<cuda::Event> done,
                     Device device, std::vector<Tensor> tensors)
    : what_(std::move(what)),
      comm_(std::move(comm)),
      done_(std::move(done)),
      device_(device),
      issued_(std::chrono::steady_clock::now()),
      tensors_(std::move(tensors)) {}

bool EventWork::poll() {
  {
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    if (completed_) return true;
  }
  try {
    if (done_->query()) {
      // ncclCommAbort ends NCCL's kernels early, and their events complete
      // all the same.
      const std::string aborted = comm_->aborted_because();
      KILN_CHECK(aborted.empty(), "nccl ", what_, " on ", comm_->description(),
                 ": the communicator was aborted before this operation was seen to complete (", aborted,
                 "), so its results cannot be trusted");
      std::lock_guard lock(mutex_);
      completed_ = true;
      tensors_.clear();
      return true;
    }
    comm_->check_async_error(what_);
    if (std::chrono::steady_clock::now() - issued_ >= comm_->timeout()) {
      comm_->abort(what_ + " timed out");
      KILN_FAIL("nccl ", what_, " on ", comm_->description(), " did not complete within ", comm_->timeout().count(),
                " ms of being issued (a peer that never joined it, or a kernel queued before it that never "
                "ended); the communicator was aborted");
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
    std::rethrow_exception(error_);
  }
  return false;
}

bool EventWork::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::microseconds pause = kFirstPause;
  while (!poll()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, kLongestPause);
  }
  // The host has seen the event complete, so this stream wait is already
  // satisfied; it states the order to CUDA as well (Note [NCCL streams]).
  done_->block(cuda::current_stream(device_));
  return true;
}

bool EventWork::is_completed() {
  {
    std::lock_guard lock(mutex_);
    if (completed_ || error_) return true;
  }
  try {
    return done_->query();
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
    return true;
  }
}

void EventWork::abandon(const std::string& reason) { comm_->abort(what_ + " was abandoned: " + reason); }

std::exception_ptr EventWork::exception() {
  std::lock_guard lock(mutex_);
  return error_;
}

}  // namespace kiln::distributed::nccl
