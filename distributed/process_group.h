// ProcessGroup: the collectives every distributed strategy is written in.
//
// A process group is a fixed set of processes (ranks 0..size-1) that run the
// same collectives in the same order. DataParallel, DDP, FSDP, pipeline and
// tensor parallelism speak only to this class; Gloo, NCCL and MPI implement
// it (distributed/backends/*). init.h creates the default group of all
// processes and sub-groups of some of them.
//
// Every collective is asynchronous and returns a Work (work.h):
//
//   auto work = group.all_reduce(grad);   // sum over ranks, in place
//   work->wait();                          // grad holds the sum
//
// Note [Collective front-end]
// The public methods here are the same for every backend and do the work no
// backend should repeat:
// - check the arguments (same dtype and device everywhere, sizes that fit,
//   a root inside the group) and throw kiln::Error naming the collective;
// - give the collective the group's next sequence number and record it in
//   the flight recorder (Note [Flight recorder]);
// - publish this rank's progress to the store (Note [Collective progress])
//   and, with KILN_DISTRIBUTED_DEBUG=1, check that every rank is calling the
//   same collective with the same dtype and shape (Note [Collective
//   fingerprints]);
// - bump the version of every tensor the collective writes (Note [Version
//   counter] in tensor/tensor.h) as it starts, so that autograd refuses a
//   saved tensor a collective overwrote (list outputs are bumped when wait()
//   copies into them);
// - hand the backend contiguous tensors: a non-contiguous argument is copied
//   into a contiguous one and the result copied back when wait() returns;
// - turn ReduceOp::Avg into a sum followed by a division for backends
//   without a native average;
// - wrap the backend's Work so that a failure or timeout raises an error
//   naming the collective, its sequence number, the group, and which ranks
//   have and have not reached it.
// The backend then implements one protected run_* method per collective on
// tensors that are already checked, contiguous and on its device.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distributed/collective_call.h"
#include "distributed/store.h"
#include "distributed/work.h"
#include "tensor/tensor.h"

namespace kiln::distributed {

enum class ReduceOp { Sum, Avg, Max, Min, Product };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...

using WorkPtr = std::shared_ptr<Work>;

class CollectiveProgress;  // collective_progress.h: Note [Collective progress]
class CollectiveWork;      // process_group.cpp: the Work users get back

struct ProcessGroupOptions {
  // Names the group in errors: "default" for the world, "group1"... for
  // new_group()'s sub-groups.
  std::string name = "default";
  // global_ranks[i] is the world rank of this group's rank i; empty means
  // the identity (the world group).
  std::vector<int> global_ranks;
  // How long a collective may take before every waiting rank raises an error.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // How long a rank waiting in a collective lets a peer that has not
  // reached it go without a heartbeat before naming it (Note [Heartbeat]).
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  // Check every collective's fingerprint across ranks first (slow: a store
  // round trip per collective). Defaults to KILN_DISTRIBUTED_DEBUG=1.
  bool debug = false;
  // Over Gloo's TCP pairs, every collective checks that the ranks agree on
  // the call (Note [Always-on collective agreement]). Off only to measure
  // what that costs (bench/agreement_ab): ranks that disagree then compute
  // wrong results without a word, and every rank must turn it off alike.
  // Elsewhere it changes nothing: the shared-memory path always checks, and
  // MPI and NCCL check in debug mode only.
  bool agreement_check = true;
};

// True when KILN_DISTRIBUTED_DEBUG is set to 1.
bool debug_mode_from_env();

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  // `store` may be null for a backend that needs none (MPI started by
  // mpirun); progress reports then say that peers' progress is unknown.
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  int global_rank(int group_rank) const;
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  std::chrono::milliseconds heartbeat_timeout() const { return options_.heartbeat_timeout; }
  bool debug() const { return options_.debug; }
  bool agreement_check() const { return options_.agreement_check; }
  const std::shared_ptr<Store>& store() const { return store_; }
  // Collectives issued on this group so far (send and recv do not count).
  uint64_t sequence_number() const { return sequence_; }
  // "gloo", "nccl", "mpi".
  virtual std::string backend_name() const = 0;
  // Throws if `device` cannot be used with this backend ("nccl: CPU tensors...").
  virtual void check_device(const Device& device, const char* op) const = 0;
  // Where the small tensors that carry bookkeeping between ranks (DDP's
  // parameter descriptors and unused-parameter flags, a trainer's summed
  // counts) must live for this backend: the CPU for gloo and MPI, the
  // group's GPU for NCCL, which moves CUDA memory only.
  virtual Device collective_device() const { return kCPU; }

  // ---- collectives (Note [Collective front-end]) --------------------------

  // Reduces `tensor` over all ranks; every rank ends with the result.
  WorkPtr all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // Copies root's `tensor` into every rank's `tensor`.
  WorkPtr broadcast(const Tensor& tensor, int root);
  // Reduces `tensor` over all ranks into root's `tensor`; others' are unchanged.
  WorkPtr reduce(const Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum);
  // outputs[r] receives rank r's `input`; outputs.size() == size().
  WorkPtr all_gather(const std::vector<Tensor>& outputs, const Tensor& input);
  // `output` (size() * input.numel() elements, e.g. (size*N, ...) for an
  // input of (N, ...)) receives the inputs of ranks 0, 1, ... one after another.
  WorkPtr all_gather_into_tensor(const Tensor& output, const Tensor& input);
  // `output` receives the reduction over ranks of inputs[rank()].
  WorkPtr reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                         ReduceOp op = ReduceOp::Sum);
  // `input` holds size() chunks of output.numel() elements; `output`
  // receives the reduction over ranks of chunk rank().
  WorkPtr reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // On root, outputs[r] receives rank r's `input`; elsewhere `outputs` must be empty.
  WorkPtr gather(const std::vector<Tensor>& outputs, const Tensor& input, int root);
  // `output` receives root's inputs[rank()]; `inputs` must be empty off root.
  WorkPtr scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root);
  // outputs[r] receives rank r's inputs[rank()].
  WorkPtr all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs);
  // Completes once every rank has called it.
  WorkPtr barrier();

  // ---- point to point --------------------------------------------------------
  // Not collectives: no sequence number, no fingerprint check. A send is
  // matched with the recv of the same tag on the peer, in order.
  WorkPtr isend(const Tensor& tensor, int dst, int tag = 0);
  WorkPtr irecv(const Tensor& tensor, int src, int tag = 0);
  void send(const Tensor& tensor, int dst, int tag = 0) { isend(tensor, dst, tag)->wait(); }
  void recv(const Tensor& tensor, int src, int tag = 0) { irecv(tensor, src, tag)->wait(); }

  // ---- sub-groups -----------------------------------------------------------
  // Must be called by every rank of this group with the same `ranks` (ranks
  // of this group, sorted, unique). Returns the new group on its members and
  // null elsewhere. init.h's new_group() calls it on the world group.
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks,
                                             ProcessGroupOptions options);

  // Note [Heartbeat]: how often a rank waiting on a collective looks for a
  // silent peer, and the sentence naming one, if any.
  std::chrono::milliseconds heartbeat_check_interval() const;
  std::optional<std::string> silent_peer();

  // The message a failed or timed-out collective raises (public for tests
  // and for strategies that detect a failure themselves): names the
  // collective, its sequence number, the group, which ranks have and have
  // not reached it, and this rank's last collectives.
  std::string describe_failure(uint64_t sequence, const std::string& collective,
                               const std::string& what_happened);

 protected:
  // What a backend implements. Arguments are checked and contiguous, on a
  // device check_device() accepted; ReduceOp::Avg reaches a backend only if
  // supports_avg(). Each returns a Work that finishes when the data is in
  // place (for CUDA: ordered on the backend's stream).
  virtual WorkPtr run_all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual WorkPtr run_broadcast(const Tensor& tensor, int root) = 0;
  virtual WorkPtr run_reduce(const Tensor& tensor, int root, ReduceOp op) = 0;
  // output: (size() * input.numel()) elements, contiguous.
  virtual WorkPtr run_all_gather(const Tensor& output, const Tensor& input) = 0;
  // input: (size() * output.numel()) elements, contiguous.
  virtual WorkPtr run_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  // output: (size() * input.numel()) elements on root, undefined elsewhere.
  virtual WorkPtr run_gather(const Tensor& output, const Tensor& input, int root) = 0;
  // input: (size() * output.numel()) elements on root, undefined elsewhere.
  virtual WorkPtr run_scatter(const Tensor& output, const Tensor& input, int root) = 0;
  // input and output: (size() * chunk) elements; chunk r goes to rank r.
  virtual WorkPtr run_all_to_all(const Tensor& output, const Tensor& input) = 0;
  virtual WorkPtr run_barrier() = 0;
  virtual WorkPtr run_send(const Tensor& tensor, int dst, int tag) = 0;
  virtual WorkPtr run_recv(const Tensor& tensor, int src, int tag) = 0;
  virtual bool supports_avg() const { return false; }
  // Creates the backend's group over `ranks` (ranks of this group); called on
  // every rank of this group, members or not (MPI's communicator creation is
  // collective over the parent). `store` is already prefixed for the new group.
  virtual std::shared_ptr<ProcessGroup> run_new_subgroup(const std::vector<int>& ranks,
                                                         std::shared_ptr<Store> store,
                                                         ProcessGroupOptions options) = 0;
  // Called once when the group becomes unusable (a collective failed or
  // was given up on): a backend stops what still waits on its peers, so that
  // the process can end without waiting out the backend's own timeout.
  virtual void abort_operations(const std::string& reason) { (void)reason; }
  // The last collective `rank` is known to have entered, where the backend
  // knows it exactly (a sequence of 0: none yet); nothing where it does not,
  // and the store's published progress is used instead.
  virtual std::optional<CollectiveCall> last_call_of(int rank) const {
    (void)rank;
    return std::nullopt;
  }

 private:
  // Runs the steps of Note [Collective front-end] around the backend call
  // `run`: `signature` describes the call ("all_reduce(float32 [1024], sum)")
  // and is what debug mode compares across ranks; `finish` runs once when a
  // wait() succeeds (copies results back, divides for an average).
  WorkPtr start_collective(const std::string& signature, const std::function<WorkPtr()>& run,
                           std::function<void()> finish);
  // reduce_scatter and reduce_scatter_tensor once their input is one
  // contiguous tensor of size() chunks of output.numel() elements.
  WorkPtr start_reduce_scatter(const std::string& signature, const Tensor& output, const Tensor& input, ReduceOp op);
  // The same for send and recv: no sequence number, no fingerprint.
  WorkPtr start_point_to_point(const std::string& description, const std::function<WorkPtr()>& run,
                               std::function<void()> finish);
  void check_usable(const std::string& what) const;
  // last_call_of() in the form CollectiveProgress takes.
  std::function<std::optional<std::pair<uint64_t, std::string>>(int rank)> exact_progress() const;

  friend class CollectiveWork;
  // Marks the group unusable after a failed or timed-out collective: the
  // ranks no longer agree on which collective comes next.
  void mark_broken(const std::string& reason);

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  ProcessGroupOptions options_;
  std::atomic<uint64_t> sequence_{0};
  uint64_t subgroups_made_ = 0;
  std::unique_ptr<CollectiveProgress> progress_;
  mutable std::mutex broken_mutex_;
  std::string broken_;  // why the group is unusable; empty while it is fine
};

}  // namespace kiln::distributed
