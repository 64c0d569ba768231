// ProcessGroupGloo: the collectives of process_group.h over Gloo's TCP
// transport, for CPU tensors (and CUDA tensors staged through host memory).
//
//   auto store = std::make_shared<FileStore>("/shared/job1", /*world_size=*/2);
//   auto group = std::make_shared<ProcessGroupGloo>(store, rank, 2, ProcessGroupOptions{});
//   group->all_reduce(grad)->wait();
//
// or through init.h: init_process_group("gloo").
//
// Construction is the rendezvous (Note [Gloo rendezvous steps] in
// gloo_rendezvous.h): the ranks check that they agree on the group's size,
// each listens on an address (Note [Gloo interface] in gloo_device.h),
// publishes its pairs' addresses in the store and connects a TCP pair to
// every other rank. It returns once every rank has connected all its pairs,
// or throws kiln::Error within options.timeout naming the group, the step
// and the ranks (and addresses) it waited for. The same timeout bounds every
// operation: gloo then throws, and the Work fails with gloo's message.
//
// Note [Gloo rendezvous keys]
// The rendezvous stores rank r's pair addresses under "address/<r>", so two
// groups on one store would read each other's. A sub-group's store is
// already under the sub-group's name (new_subgroup); below that each group
// takes a generation number g = (store.add("gloo/groups", 1) - 1) / size and
// keeps its keys under "gloo/<g>/". The numbers agree across ranks without
// talking: a rank finishes the rendezvous of generation g only after every
// rank has added for g, so all adds for g come before any for g+1, and a
// world group made twice on one store (destroy_process_group, then
// init_process_group again) does not find the first one's stale addresses.
//
// Note [Gloo threads]
// Collectives run on one communication thread per group, in the order they
// were issued. Gloo matches messages by "slot" (a collective's prefix and a
// tag); the group numbers its collectives 0, 1, 2, ... as they are issued and
// uses the number as the tag, and since every rank issues the same
// collectives in the same order (Note [Collective front-end]) and runs them
// in that order, the tags agree across ranks and a fast rank's next
// collective can never be mistaken for the current one.
//
// Send and recv cannot wait on that thread. Gloo's send completes only once
// the peer has posted the matching recv, so two ranks that each isend to the
// other and then irecv would both block in their send, each recv queued
// behind it: a deadlock. So run_send and run_recv post the message at once,
// on the caller's thread (gloo's pairs are thread-safe and the posting does
// not block), and only the waiting for completion is queued, on a second
// set of threads that starts one thread per operation in flight (idle ones
// are reused). One waiter per operation, not one for all in order, because
// a program may post a recv that is matched only after later operations
// complete (pre-posted receives in pipeline schedules); waiting in order
// would hold those later operations' Works hostage. Point-to-point messages
// use their own slots (kPointToPointSlotPrefix | tag), apart from every
// collective's.
//
// Note [Gloo and CUDA tensors]
// Gloo moves host memory only. A CUDA tensor is copied into pinned host
// memory when the operation is issued, on the caller's current stream (the
// copy waits for that stream, so it sees what the caller's kernels wrote);
// Gloo works on the host copy on its thread, which then copies the result
// back to the device and waits for that copy before finishing the Work, so
// the result is on the device when wait() returns, whichever stream reads it.
// Building without CUDA, check_device() accepts only CPU tensors.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "distributed/collective_call.h"
#include "distributed/process_group.h"
#include "distributed/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace kiln::distributed {

namespace gloo_backend {
class OperationThreads;
class SharedMemoryAllReduce;
// The top byte of a point-to-point message's slot; gloo's collectives use
// 0x01-0x08, the ring reduce-scatter kReduceScatterSlotPrefix (0x40).
inline constexpr uint8_t kPointToPointSlotPrefix = 0x50;
}  // namespace gloo_backend

class ProcessGroupGloo : public ProcessGroup {
 public:
  // Connects to the other `size` - 1 ranks through `store` (required).
  // Every rank of the group must construct it with the same `size` and its
  // own `rank`; throws kiln::Error if the peers do not all arrive within
  // options.timeout.
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options);
  // Runs the collectives still queued (the peers expect them), aborts
  // point-to-point operations still waiting, and closes the connections.
  ~ProcessGroupGloo() override;

  std::string backend_name() const override { return "gloo"; }
  // CPU tensors; CUDA tensors too when Kiln is built with CUDA.
  void check_device(const Device& device, const char* op) const override;
  // Whether all-reduces go through shared memory (Note [Same-host all-reduce
  // through shared memory]) rather than Gloo's TCP pairs.
  bool uses_shared_memory() const { return shared_memory_ != nullptr; }

 protected:
  void abort_operations(const std::string& reason) override;
  std::optional<CollectiveCall> last_call_of(int rank) const override;

 public:

 protected:
  WorkPtr run_all_reduce(const Tensor& tensor, ReduceOp op) override;
  WorkPtr run_broadcast(const Tensor& tensor, int root) override;
  WorkPtr run_reduce(const Tensor& tensor, int root, ReduceOp op) override;
  WorkPtr run_all_gather(const Tensor& output, const Tensor& input) override;
  WorkPtr run_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkPtr run_gather(const Tensor& output, const Tensor& input, int root) override;
  WorkPtr run_scatter(const Tensor& output, const Tensor& input, int root) override;
  WorkPtr run_all_to_all(const Tensor& output, const Tensor& input) override;
  WorkPtr run_barrier() override;
  WorkPtr run_send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr run_recv(const Tensor& tensor, int src, int tag) override;
  // A group over `ranks` on the same Gloo device (the same listening
  // address), rendezvousing through `store`; null on non-members.
  std::shared_ptr<ProcessGroup> run_new_subgroup(const std::vector<int>& ranks, std::shared_ptr<Store> store,
                                                 ProcessGroupOptions options) override;

 private:
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                   std::shared_ptr<::gloo::transport::Device> device);

  // Where a collective checks that every rank makes the same call (Note
  // [Always-on collective agreement]): before its body runs, or in the body
  // itself (the all-reduce, whose shared-memory path checks as it waits).
  enum class Agreement { BeforeBody, InBody };
  // Queues `body(tag)` on the communication thread with the next tag.
  WorkPtr enqueue_collective(const CollectiveCall& call, std::function<void(uint32_t tag)> body,
                             Agreement agreement = Agreement::BeforeBody);
  // Note [Point-to-point preamble]: the steps of a send and a recv. Each
  // waited-for buffer is registered in pending_ (false when the group is
  // being destroyed, and nothing may be posted any more).
  bool track(const std::shared_ptr<::gloo::transport::UnboundBuffer>& buffer, bool is_recv);
  // Waits for a tracked buffer's send or recv; throws kiln::Error naming
  // `name` if it was aborted.
  void wait_tracked(const std::shared_ptr<::gloo::transport::UnboundBuffer>& buffer, bool is_recv,
                    std::chrono::milliseconds timeout, const std::string& name);
  // Opens when a recv has posted its data (or given up), so that the next
  // recv from the same rank with the same tag posts after it.
  struct RecvGate;

  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<::gloo::Context> context_;
  // Every all-reduce's path when all ranks share this host (Note [Same-host
  // all-reduce through shared memory]); null otherwise.
  std::shared_ptr<gloo_backend::SharedMemoryAllReduce> shared_memory_;
  // Set once a collective was given up (abort_operations): queued
  // collectives fail at once, and the destructor does not wait for one
  // stuck in Gloo on a peer that stopped answering.
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  // Over TCP, the last call each rank sent this one (Note [Always-on
  // collective agreement]): exact progress for failure reports. `check` is
  // false only in a group made with ProcessGroupOptions::agreement_check
  // off: its collectives then exchange no calls.
  struct CallsSeen {
    CallsSeen(int size, bool check) : calls(static_cast<size_t>(size)), check(check) {}
    std::mutex mutex;
    std::vector<CollectiveCall> calls;  // (size): calls[r] is rank r's last; sequence 0 for none
    const bool check;
  };
  std::shared_ptr<CallsSeen> calls_seen_ = std::make_shared<CallsSeen>(size(), agreement_check());
  // The group's name for the operations' errors, shared rather than copied
  // into each queued operation.
  std::shared_ptr<const std::string> group_name_ = std::make_shared<const std::string>(name());

  std::mutex issue_mutex_;  // makes tag order the queue order
  uint32_t next_tag_ = 0;
  std::unique_ptr<gloo_backend::OperationThreads> collectives_;

  // Posted sends and recvs not yet complete, so that the destructor can
  // abort their waits.
  std::mutex pending_mutex_;
  std::set<std::pair<::gloo::transport::UnboundBuffer*, bool>> pending_;  // (buffer, is_recv)
  bool closing_ = false;
  // The newest recv's gate per (source rank, tag).
  std::map<std::pair<int, int>, std::shared_ptr<RecvGate>> last_recv_gate_;
  std::unique_ptr<gloo_backend::OperationThreads> point_to_point_;
};

}  // namespace kiln::distributed
