// OperationQueue: one MPI communicator and the thread that runs its
// operations in the order they were queued (Note [MPI threading] in
// process_group_mpi.h).
//
// Only the MPI backend's own sources include this header (it includes <mpi.h>).
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/work.h"
#include "tensor/tensor.h"

namespace kiln::distributed::mpi {

struct Operation {
  // A collective holds the queue until it completes; a point-to-point
  // operation is posted and completes in the background, so that the recv
  // queued after a send is posted before the send completes.
  enum class Kind { Collective, PointToPoint };

  // Names the operation in errors: "all_reduce", "send to rank 1 (tag 0)".
  std::string name;
  Kind kind = Kind::Collective;
  // Runs on the communication thread with mpi::lock() held. Posts the
  // operation and returns its request, or MPI_REQUEST_NULL when it already
  // completed (a blocking call such as MPI_Comm_split). Throws on failure.
  std::function<MPI_Request(MPI_Comm)> start;
  // Optional; runs with mpi::lock() held once the request has completed, and
  // throws to fail the operation (a recv checks how much arrived).
  std::function<void(const MPI_Status&)> check_status;
  // Kept alive until the operation is over: MPI reads and writes their memory
  // until then.
  std::vector<Tensor> tensors;
};

class OperationQueue {
 public:
  // Takes `comm` over (errors are returned to Kiln rather than aborting the
  // job, and the queue frees it at the end). `description` names the group
  // and rank in errors. The destructor lets operations already queued run
  // for up to `drain_timeout`.
  OperationQueue(MPI_Comm comm, std::string description, std::chrono::milliseconds drain_timeout);
  // Waits for queued operations to finish (up to the drain timeout), stops
  // the thread and frees the communicator. Operations still running after
  // the drain timeout are failed and abandoned: their requests, tensors and
  // the communicator are left to MPI, which may still write into them, and
  // the job should be aborted (ProcessGroupMPI::abort).
  ~OperationQueue();
  OperationQueue(const OperationQueue&) = delete;
  OperationQueue& operator=(const OperationQueue&) = delete;

  // Queues `op`; the returned Work finishes when its request completes, or
  // fails with the error start() threw or MPI reported.
  std::shared_ptr<ThreadWork> enqueue(Operation op);

  MPI_Comm comm() const { return comm_; }

 private:
  struct Running {
    Operation op;
    std::shared_ptr<ThreadWork> work;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void run();
  // Takes queued operations and posts them until a collective is running.
  // Returns whether it posted anything.
  bool start_queued(std::vector<Running>& running);
  // Tests every running request once; returns whether any completed.
  bool poll(std::vector<Running>& running);
  // After the drain timeout: fails and abandons whatever is left.
  void abandon(std::vector<Running>& running);
  void fail(const std::shared_ptr<ThreadWork>& work, const std::string& message);

  MPI_Comm comm_;
  std::string description_;
  std::chrono::milliseconds drain_timeout_;
  // True when operations were abandoned while MPI may still use the
  // communicator, so it must not be freed.
  bool comm_in_use_ = false;

  std::mutex mutex_;  // guards queue_, stopping_, stop_deadline_
  std::condition_variable wake_;
  std::deque<Running> queue_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_deadline_;

  std::thread thread_;
};

}  // namespace kiln::distributed::mpi
