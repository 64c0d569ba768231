// EventWork: the Work of an NCCL operation, done when a CUDA event recorded
// on the group's NCCL stream after the operation is (Note [NCCL streams] in
// process_group_nccl.h).
//
// wait_for() polls the event (cudaEventQuery) and the communicator's error
// state (ncclCommGetAsyncError) until the event is done, NCCL reports an
// error, or `timeout` passes; once the event is done it makes the calling
// thread's current stream wait on it, so that work queued there afterwards
// sees the results. Independently of the caller's `timeout`, an operation
// still running when the group's timeout has passed since it was issued
// counts as hung: the communicator is aborted and wait_for() throws (Note
// [NCCL timeouts] in communicator.h). A short wait_for() is therefore a
// harmless poll, and a wait() with the group's timeout cannot outlast it.
// An abort ends NCCL's kernels early and their events complete all the same,
// so a Work first seen complete after its communicator was aborted fails
// rather than hand over results the abort may have cut short.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/work.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"

namespace kiln::distributed::nccl {

class Communicator;

class EventWork : public Work {
 public:
  // `done` was recorded on the NCCL stream right after the operation `what`
  // was issued on `comm`, on `device`; `tensors` (every tensor it reads or
  // writes) are kept alive until it completes.
  EventWork(std::string what, std::shared_ptr<Communicator> comm, std::shared_ptr<cuda::Event> done, Device device,
            std::vector<Tensor> tensors);

  bool wait_for(std::chrono::milliseconds timeout) override;
  // Asks the event only, so that it never blocks, not even on the
  // communicator's lock (the flight recorder calls it while writing an error).
  bool is_completed() override;
  std::exception_ptr exception() override;
  // Aborts the communicator: the kernel would otherwise go on waiting for
  // its peers after the group has given up on it.
  void abandon(const std::string& reason) override;

 private:
  // True once the event is done. Throws, and keeps the error for later
  // calls, when CUDA or NCCL report one or the operation has outlived the
  // group's timeout (the communicator is then aborted).
  bool poll();

  const std::string what_;
  const std::shared_ptr<Communicator> comm_;
  const std::shared_ptr<cuda::Event> done_;
  const Device device_;
  const std::chrono::steady_clock::time_point issued_;

  std::mutex mutex_;
  bool completed_ = false;
  std::exception_ptr error_;
  std::vector<Tensor> tensors_;  // released once completed
};

}  // namespace kiln::distributed::nccl
