#include "distributed/backends/gloo/operation_threads.h"

#include <exception>

#include "tensor/error.h"

namespace kiln::distributed::gloo_backend {

OperationThreads::OperationThreads(size_t max_threads) : max_threads_(max_threads) {
  KILN_CHECK(max_threads >= 1, "OperationThreads: max_threads must be at least 1, got ", max_threads);
}

OperationThreads::~OperationThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

std::shared_ptr<ThreadWork> OperationThreads::enqueue(std::string name, std::function<void()> operation) {
  auto work = std::make_shared<ThreadWork>();
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(name), std::move(operation), work});
    // Each idle thread takes one queued operation; any beyond those need a
    // thread of their own, if one may be started.
    if (queue_.size() > idle_ && threads_.size() < max_threads_) threads_.emplace_back([this] { loop(); });
  }
  wake_.notify_one();
  return work;
}

void OperationThreads::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    ++idle_;
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, and nothing left to run
    Operation operation = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    run(operation);
    lock.lock();
  }
}

void OperationThreads::run(Operation& operation) {
  try {
    // The operation's closure holds its tensors (FSDP's gathered and
    // gradient buffers): it is destroyed before the work completes, so that
    // a caller whose wait() has returned sees that memory freed.
    std::function<void()> body = std::move(operation.run);
    body();
    body = nullptr;
    operation.work->finish();
    return;
  } catch (const Error&) {
    operation.work->fail(std::current_exception());
    return;
  } catch (const std::exception& e) {
    try {
      KILN_FAIL("gloo ", operation.name, ": ", e.what());
    } catch (const Error&) {
      operation.work->fail(std::current_exception());
    }
  } catch (...) {
    try {
      KILN_FAIL("gloo ", operation.name, ": failed with an exception that is not a std::exception");
    } catch (const Error&) {
      operation.work->fail(std::current_exception());
    }
  }
}

}  // namespace kiln::distributed::gloo_backend
