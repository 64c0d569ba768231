// Communicator: one NCCL communicator, made non-blocking so that nothing
// Kiln asks of NCCL can hang past the group's timeout.
//
//   auto comm = nccl::Communicator::create(id, rank, size, "group 'default' (rank 0 of 2 on cuda:0)", timeout);
//   comm->run("all_reduce", [&](ncclComm_t c) {
//     KILN_NCCL_CHECK_ISSUED(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, c, stream));
//   });
//
// Note [NCCL timeouts]
// A blocking NCCL communicator can hang the calling thread for ever:
// ncclCommInitRank waits for every rank to join, the first send to a peer
// waits for it to connect, and a collective's kernel spins on the GPU until
// its peers arrive. So every communicator is made with config.blocking = 0
// (ncclCommInitRankConfig, ncclCommSplit), and then:
// - every NCCL call returns at once. ncclInProgress means NCCL is still
//   working on it in its own threads (joining, connecting, enqueueing the
//   kernels); until ncclCommGetAsyncError says ncclSuccess nothing else may
//   be asked of the communicator, and the kernels may not be on the stream
//   yet. Communicator::run polls it, holding the communicator's lock, for at
//   most the group's timeout.
// - a kernel that waits for a peer that never comes is seen by whoever waits
//   on its Work (event_work.h), which polls the Work's CUDA event and
//   ncclCommGetAsyncError, and gives up once the group's timeout has passed
//   since the collective was issued.
// When the timeout passes or NCCL reports an error, the communicator is
// aborted (ncclCommAbort: NCCL's kernels on this rank exit and its threads
// stop) and a kiln::Error is raised; the front-end then marks the group
// broken (Note [Collective front-end]). An aborted communicator cannot be
// used again: every later call says why it was aborted, and so does every
// Work not yet seen complete (the abort may have cut it short). The peers find
// out through their own timeouts (every rank has the same one) or through
// NCCL's remote-error reporting.
//
// There is no watchdog thread (PyTorch's ProcessGroupNCCL has one): a
// collective nobody waits on times out only when a later Work of the group
// is waited on, or when the group is destroyed (its destructor waits for
// the group's last collective for at most the timeout).
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace kiln::distributed::nccl {

class Communicator {
 public:
  // Joins the communicator of `size` ranks that `id` names, as `rank`, on
  // the calling thread's current CUDA device. `description` names it in
  // errors ("group 'default' (rank 1 of 4 on cuda:1)"). Throws kiln::Error,
  // after aborting, if NCCL fails or not every rank joins within `timeout`.
  static std::shared_ptr<Communicator> create(const ncclUniqueId& id, int rank, int size, std::string description,
                                              std::chrono::milliseconds timeout);

  // A communicator of the ranks that pass `member` = true, ordered by `key`
  // (ncclCommSplit). Every rank of this communicator must call it; returns
  // null on non-members. Throws kiln::Error, after aborting this
  // communicator (the ranks no longer agree on what it is doing), if NCCL
  // fails or the other ranks do not all call it within `timeout`.
  std::shared_ptr<Communicator> split(bool member, int key, std::string description, std::chrono::milliseconds timeout);

  // close().
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Calls `issue` with the NCCL handle, under the communicator's lock;
  // `issue` makes NCCL calls checked with KILN_NCCL_CHECK_ISSUED (and may
  // queue CUDA copies before them). Returns once NCCL has taken them all: the
  // kernels are then on their stream. Throws kiln::Error naming `what`, after
  // aborting, if a call fails or NCCL is not done within the timeout.
  void run(const std::string& what, const std::function<void(ncclComm_t)>& issue);

  // Throws kiln::Error naming `what`, after aborting, if NCCL has reported
  // an error on this communicator (ncclCommGetAsyncError), or if it was
  // aborted or closed before.
  void check_async_error(const std::string& what);

  // ncclCommAbort, unless the communicator is already gone; later calls
  // raise saying it was aborted because of `reason`.
  void abort(const std::string& reason);

  // Why the communicator was aborted ("it was aborted after all_reduce
  // failed"), or empty while it was not. An operation that had not been
  // seen to complete before an abort may have been cut short by it. Takes
  // no lock: a Work that has completed asks it, and must not wait behind
  // another thread's operation, which holds the lock while NCCL settles.
  std::string aborted_because() const;

  // Lets NCCL finish what was issued and frees the communicator
  // (ncclCommFinalize, then ncclCommDestroy), waiting at most the timeout;
  // aborts it instead if that fails. Never throws; says on stderr when it had
  // to abort. Does nothing the second time.
  void close() noexcept;

  const std::string& description() const { return description_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  Communicator(std::string description, std::chrono::milliseconds timeout);

  void throw_if_gone_locked(const std::string& what) const;
  void abort_locked(const std::string& reason) noexcept;

  const std::string description_;  // also NCCL's commName, so it must outlive the handle
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;  // every use of handle_
  ncclComm_t handle_ = nullptr;
  // Why handle_ is null once it was aborted or closed. Written before
  // aborted_ is set, and never after, so a reader that sees aborted_ true
  // may read it without the lock.
  std::string gone_because_;
  std::atomic<bool> aborted_{false};
};

}  // namespace kiln::distributed::nccl
