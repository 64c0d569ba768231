// Work: the handle a collective returns, so that callers can overlap
// communication with computation.
//
// Every collective of a ProcessGroup is asynchronous: it is queued (on the
// group's communication thread for Gloo and MPI, on the communication stream
// for NCCL) and the call returns at once with a Work. The tensors it reads
// and writes must stay alive and untouched until wait() returns; the Work
// keeps them alive, the caller keeps them untouched.
//
//   auto work = group.all_reduce(bucket);   // starts in the background
//   ...compute the next layer's gradients...
//   work->wait();                           // bucket now holds the sum
//
// Backends implement the small interface below; the ProcessGroup front-end
// wraps it in a CollectiveWork (process_group.cpp) that names the collective
// in errors and reports which ranks reached it (Note [Collective progress]).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

namespace kiln::distributed {

class Work {
 public:
  virtual ~Work() = default;

  // Blocks until the operation has finished or `timeout` has passed; returns
  // false in the second case. Rethrows the operation's error if it failed.
  // This is the primitive backends implement.
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;

  // Blocks until the operation has finished; throws kiln::Error if it failed
  // or did not finish within `timeout` (for a collective: the group's
  // timeout when not given). After it returns the outputs hold their
  // results; for CUDA tensors the current stream is also ordered after the
  // operation, as PyTorch's NCCL work is.
  virtual void wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // True once the operation has finished, successfully or not; never blocks.
  virtual bool is_completed() = 0;

  // The error the operation ended with, or null (also while it runs).
  virtual std::exception_ptr exception() = 0;

  // Called when wait() gives up on the operation, whose group is then
  // broken: a backend whose operations run on a device stops them there
  // (NCCL aborts the communicator, so that its kernels end and the peers
  // see an error instead of waiting for this rank). The others need not.
  virtual void abandon(const std::string& reason) { (void)reason; }
};

// A Work finished by another thread: the backend's communication thread
// calls finish() (or fail()) exactly once; waiters block on a condition
// variable. Gloo and MPI return these.
class ThreadWork : public Work {
 public:
  bool wait_for(std::chrono::milliseconds timeout) override;
  bool is_completed() override;
  std::exception_ptr exception() override;

  void finish();
  void fail(std::exception_ptr error);

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace kiln::distributed
