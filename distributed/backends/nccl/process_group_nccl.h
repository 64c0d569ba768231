// ProcessGroupNCCL: the collectives of process_group.h over NCCL, for CUDA
// tensors.
//
//   // every process, started by kiln-run --nproc-per-node 4 (one per GPU):
//   cudaSetDevice(std::atoi(std::getenv("LOCAL_RANK")));  // before the group
//   distributed::init_process_group("nccl");               // env://
//   distributed::all_reduce(grad);                         // grad on that GPU
//
// One process drives one GPU. The group's device is the CUDA device that is
// current on the thread constructing it, and every tensor given to the group
// must be on that device (check_device). Under kiln-run or torchrun a
// process takes the GPU LOCAL_RANK names (its index on its machine) and
// makes it current before creating the group, as PyTorch's
// torch.cuda.set_device(local_rank) does; two ranks on one GPU make NCCL fail
// at construction. CPU tensors are refused: the gloo backend is the one for
// them.
//
// Construction is the rendezvous (Note [NCCL rendezvous]), and every
// collective and point-to-point operation runs on the group's NCCL stream
// (Note [NCCL streams]). Nothing waits for NCCL without a timeout: the
// group's timeout bounds the rendezvous, every call into NCCL and every
// operation, after which the communicator is aborted and a kiln::Error
// raised (Note [NCCL timeouts] in communicator.h).
//
// Note [NCCL rendezvous]
// NCCL ranks find each other through a unique id that rank 0 makes
// (ncclGetUniqueId: rank 0's bootstrap address and a random key); the others
// read it from the store and all call ncclCommInitRankConfig with it. Groups
// keep their ids apart as Gloo keeps its addresses (Note [Gloo rendezvous
// keys]): a sub-group's store is already under its name, and below that each
// group takes a generation number g = (store.add("nccl/groups", 1) - 1) /
// size and keeps its id under "nccl/<g>/unique_id". No rank finishes
// ncclCommInitRankConfig for generation g before every rank has joined it,
// so all adds for g come before any for g+1, and a group made again on the
// same store never reads a stale id. Sub-groups need no id: new_group
// splits the parent's communicator (ncclCommSplit, every rank of the parent
// taking part, non-members with NCCL_SPLIT_NOCOLOR).
//
// Note [NCCL streams]
// NCCL runs on a CUDA stream of the group's own (a high-priority pool stream
// of its device, Note [Current stream]), so that communication overlaps the
// computation on the caller's current stream, and the GPU schedules a
// collective's blocks ahead of queued computation, which would otherwise
// delay every rank waiting in it (side streams are normal priority unless
// asked, so NCCL does not share one with them). The two are ordered by
// events, as in PyTorch's ProcessGroupNCCL:
// - before each operation the NCCL stream waits for an event recorded on
//   the caller's current stream, so NCCL reads what the caller's kernels
//   wrote (the gradient computed a moment ago);
// - after it an event is recorded on the NCCL stream; the Work's wait()
//   polls that event and then makes the waiting thread's current stream wait
//   on it (event_work.h), so what that stream runs next reads the results;
// - every tensor the operation touches is marked with the caching
//   allocator's record_stream for the NCCL stream: if the caller drops it
//   before NCCL has run (a Work never waited on), its memory is not handed
//   to another tensor until the NCCL stream is past it.
// Until wait() returns the caller must not write the tensors (NCCL may not
// have read them yet) nor read the outputs. The group issues one operation
// at a time, so a group may be shared by threads; as on every backend, all
// ranks must still issue the same collectives in the same order.
//
// Note [NCCL point to point]
// send and recv are ncclSend and ncclRecv on the NCCL stream. NCCL has no
// tags: messages between two ranks are matched in the order they were
// posted, whatever their tag (the tag is ignored; it still shows in error
// messages). A recv also holds up everything issued on the group after it
// until its message arrives, since it occupies the one NCCL stream; and NCCL
// completes a send only once its recv runs, so two ranks that each send to
// the other before receiving wait for each other for ever (until the
// timeout aborts them) for messages too large for NCCL's buffers: order such
// exchanges (lower rank sends first) or use all_to_all, which runs its
// sends and receives together.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/store.h"
#include "tensor/cuda/stream.h"

// As nccl.h declares it, so that this header does not need NCCL's.
struct ncclComm;
typedef struct ncclComm* ncclComm_t;

namespace kiln::distributed {

namespace nccl {
class Communicator;
}  // namespace nccl

class ProcessGroupNCCL : public ProcessGroup {
 public:
  // Joins the other `size` - 1 ranks through `store` (required) on the
  // current CUDA device. Every rank must construct it with the same `size`
  // and its own `rank`; throws kiln::Error if there is no CUDA device, or if
  // the peers do not all arrive within options.timeout.
  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options);
  // Waits (at most the timeout) for the last operation issued, then frees
  // the communicator (ncclCommFinalize, ncclCommDestroy); aborts it instead
  // (ncclCommAbort) when it is broken or that wait runs out.
  ~ProcessGroupNCCL() override;

  std::string backend_name() const override { return "nccl"; }
  // Only CUDA tensors on the group's device.
  void check_device(const Device& device, const char* op) const override;
  Device collective_device() const override { return device_; }
  // The GPU this process drives.
  Device device() const { return device_; }

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
  // Note [NCCL point to point]: `tag` is ignored.
  WorkPtr run_send(const Tensor& tensor, int dst, int tag) override;
  WorkPtr run_recv(const Tensor& tensor, int src, int tag) override;
  // ncclAvg.
  bool supports_avg() const override { return true; }
  // Splits this group's communicator (Note [NCCL rendezvous]); null on
  // non-members. The new group has a stream of its own on the same device.
  std::shared_ptr<ProcessGroup> run_new_subgroup(const std::vector<int>& ranks, std::shared_ptr<Store> store,
                                                 ProcessGroupOptions options) override;

 private:
  // Throws while device_ is capturing a CUDA graph: a collective in a graph
  // would pull the NCCL stream into the capture and leave its Work's event
  // unusable, so Kiln does not capture collectives.
  void refuse_capture(const std::string& op) const;

  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options, Device device,
                   std::shared_ptr<nccl::Communicator> comm);

  // Runs `issue` (NCCL calls, and CUDA copies before them, on the stream it
  // is given) on the NCCL stream after the work queued so far on the
  // caller's current stream, and returns the Work that completes with it
  // (Note [NCCL streams]). `tensors` are all the tensors it reads or writes;
  // undefined ones are skipped.
  WorkPtr launch(const std::string& what, std::vector<Tensor> tensors,
                 const std::function<void(ncclComm_t comm, cudaStream_t stream)>& issue);

  const Device device_;
  const cuda::Stream stream_;
  const std::shared_ptr<nccl::Communicator> comm_;

  std::mutex launch_mutex_;                 // one operation issued at a time
  std::shared_ptr<cuda::Event> last_done_;  // the last operation's event, for the destructor
};

}  // namespace kiln::distributed
