// OperationThreads: the threads that run a Gloo group's operations and
// finish their Works (Note [Gloo threads] in process_group_gloo.h).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/work.h"

namespace kiln::distributed::gloo_backend {

class OperationThreads {
 public:
  // With max_threads == 1, one thread runs the operations one at a time in
  // the order they were queued. With more, an operation starts as soon as it
  // is queued, on an idle thread or on a new one while fewer than
  // max_threads exist.
  explicit OperationThreads(size_t max_threads);
  // Runs every operation still queued, then joins the threads.
  ~OperationThreads();
  OperationThreads(const OperationThreads&) = delete;
  OperationThreads& operator=(const OperationThreads&) = delete;

  // Queues `operation`; the Work finishes when it returns, or fails with the
  // kiln::Error it throws. Any other exception (gloo::IoException,
  // gloo::EnforceNotMet, ...) becomes a kiln::Error "gloo <name>: <what()>".
  std::shared_ptr<ThreadWork> enqueue(std::string name, std::function<void()> operation);

 private:
  struct Operation {
    std::string name;
    std::function<void()> run;
    std::shared_ptr<ThreadWork> work;
  };

  void loop();
  static void run(Operation& operation);

  const size_t max_threads_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::deque<Operation> queue_;
  size_t idle_ = 0;  // threads waiting for an operation
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::distributed::gloo_backend
