#include "distributed/backends/mpi/operation_queue.h"

#include <exception>

#include "distributed/backends/mpi/mpi_runtime.h"
#include "tensor/error.h"

namespace kiln::distributed::mpi {

namespace {

// Operations abandoned after a drain timeout. MPI may still write into their
// tensors and requests, so they are kept until the process ends, and never
// destroyed (their destructors would run after MPI_Finalize).
std::vector<Operation>& abandoned_operations() {
  static auto* operations = new std::vector<Operation>;
  return *operations;
}

}  // namespace

OperationQueue::OperationQueue(MPI_Comm comm, std::string description, std::chrono::milliseconds drain_timeout)
    : comm_(comm), description_(std::move(description)), drain_timeout_(drain_timeout) {
  {
    auto guard = lock();
    // The default, MPI_ERRORS_ARE_FATAL, ends the whole job on the first
    // error; returning it lets the front-end raise an error that names the
    // collective, and the program decide.
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler (" + description_ + ")");
  }
  thread_ = std::thread([this] { run(); });
}

OperationQueue::~OperationQueue() {
  {
    std::lock_guard guard(mutex_);
    stopping_ = true;
    stop_deadline_ = std::chrono::steady_clock::now() + drain_timeout_;
  }
  wake_.notify_all();
  thread_.join();
  auto guard = lock();
  if (!comm_in_use_ && !finalized()) MPI_Comm_free(&comm_);
}

std::shared_ptr<ThreadWork> OperationQueue::enqueue(Operation op) {
  auto work = std::make_shared<ThreadWork>();
  {
    std::lock_guard guard(mutex_);
    queue_.push_back(Running{std::move(op), work});
  }
  wake_.notify_all();
  return work;
}

void OperationQueue::fail(const std::shared_ptr<ThreadWork>& work, const std::string& message) {
  try {
    KILN_FAIL(message);
  } catch (...) {
    work->fail(std::current_exception());
  }
}

bool OperationQueue::start_queued(std::vector<Running>& running) {
  bool started = false;
  while (true) {
    for (const Running& r : running) {
      if (r.op.kind == Operation::Kind::Collective) return started;
    }
    Running next;
    {
      std::lock_guard guard(mutex_);
      if (queue_.empty()) return started;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    started = true;
    try {
      auto guard = lock();
      KILN_CHECK(!finalized(), "mpi: ", next.op.name, " (", description_,
                 "): MPI was finalised (the process is exiting) before it started");
      next.request = next.op.start(comm_);
    } catch (...) {
      next.work->fail(std::current_exception());
      continue;
    }
    running.push_back(std::move(next));
  }
}

bool OperationQueue::poll(std::vector<Running>& running) {
  std::vector<Running> completed;
  std::vector<std::pair<Running, std::exception_ptr>> failed;
  {
    auto guard = lock();
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      int done = 0;
      std::exception_ptr error;
      try {
        KILN_CHECK(!finalized(), "mpi: ", r.op.name, " (", description_,
                   "): MPI was finalised (the process is exiting) while it was running");
        MPI_Status status;
        check(MPI_Test(&r.request, &done, &status), r.op.name + " (" + description_ + ")");
        if (done && r.op.check_status) r.op.check_status(status);
      } catch (...) {
        error = std::current_exception();
      }
      if (!done && !error) {
        ++i;
        continue;
      }
      if (error) {
        failed.emplace_back(std::move(r), error);
      } else {
        completed.push_back(std::move(r));
      }
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  // Finished outside the MPI lock: a waiter woken here may queue the next
  // operation at once.
  for (Running& r : completed) r.work->finish();
  for (auto& [r, error] : failed) r.work->fail(error);
  return !completed.empty() || !failed.empty();
}

void OperationQueue::abandon(std::vector<Running>& running) {
  std::deque<Running> unstarted;
  {
    std::lock_guard guard(mutex_);
    unstarted.swap(queue_);
  }
  for (Running& r : unstarted) {
    fail(r.work, detail::str("mpi: ", r.op.name, " (", description_, ") had not started when the group was "
                             "destroyed ", drain_timeout_.count(), " ms after the operations before it"));
  }
  if (running.empty()) return;
  comm_in_use_ = true;
  for (Running& r : running) {
    fail(r.work, detail::str("mpi: ", r.op.name, " (", description_, ") was still running ",
                             drain_timeout_.count(), " ms after the group was destroyed and was abandoned; "
                             "MPI cannot cancel it, so abort the MPI job (ProcessGroupMPI::abort)"));
    auto guard = lock();
    abandoned_operations().push_back(std::move(r.op));
  }
  running.clear();
}

void OperationQueue::run() {
  std::vector<Running> running;  // posted, not yet complete; at most one collective
  Backoff backoff;
  while (true) {
    {
      std::unique_lock guard(mutex_);
      if (running.empty()) {
        wake_.wait(guard, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_ && queue_.empty()) return;
      }
      if (stopping_ && std::chrono::steady_clock::now() >= stop_deadline_) {
        guard.unlock();
        abandon(running);
        return;
      }
    }
    const bool started = start_queued(running);
    const bool finished = poll(running);
    if (started || finished) {
      backoff.reset();
    } else {
      backoff.pause();
    }
  }
}

}  // namespace kiln::distributed::mpi
