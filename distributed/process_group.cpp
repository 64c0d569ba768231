#include "distributed/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "distributed/collective_fingerprint.h"
#include "distributed/collective_progress.h"
#include "distributed/flight_recorder.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace kiln::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Product: return "product";
  }
  return "?";
}

bool debug_mode_from_env() {
  const char* value = std::getenv("KILN_DISTRIBUTED_DEBUG");
  return value && std::strcmp(value, "1") == 0;
}

// ---- the Work users get back --------------------------------------------------

class CollectiveWork : public Work {
 public:
  CollectiveWork(std::shared_ptr<ProcessGroup> group, uint64_t sequence, std::string description,
                 uint64_t record_id, WorkPtr inner, std::function<void()> finish)
      : group_(std::move(group)),
        sequence_(sequence),
        description_(std::move(description)),
        record_id_(record_id),
        inner_(std::move(inner)),
        finish_(std::move(finish)) {}

  bool wait_for(std::chrono::milliseconds timeout) override {
    bool done = false;
    try {
      done = inner_->wait_for(timeout);
    } catch (const std::exception& e) {
      FlightRecorder::instance().set_state(record_id_, RecordState::Failed);
      fail(std::string("failed: ") + e.what());
    }
    if (!done) return false;
    std::call_once(finished_, [&] {
      if (finish_) finish_();
    });
    FlightRecorder::instance().set_state(record_id_, RecordState::Completed);
    return true;
  }

  // Waits in slices of the heartbeat interval, looking between them for a
  // peer that has stopped answering (Note [Heartbeat]), which ends the wait
  // long before the timeout.
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    using Clock = std::chrono::steady_clock;
    const auto limit = timeout.value_or(group_->timeout());
    const auto deadline = Clock::now() + limit;
    const std::chrono::milliseconds slice = group_->heartbeat_check_interval();
    while (true) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (wait_for(std::clamp(left, std::chrono::milliseconds(0), slice))) return;
      if (Clock::now() >= deadline) break;
      if (std::optional<std::string> silent = group_->silent_peer()) {
        inner_->abandon("a peer stopped answering");
        FlightRecorder::instance().set_state(record_id_, RecordState::TimedOut);
        fail("stopped waiting: " + *silent);
      }
    }
    inner_->abandon("its wait timed out after " + std::to_string(limit.count()) + " ms");
    FlightRecorder::instance().set_state(record_id_, RecordState::TimedOut);
    fail("did not finish within " + std::to_string(limit.count()) + " ms");
  }

  bool is_completed() override { return inner_->is_completed(); }
  std::exception_ptr exception() override { return inner_->exception(); }

 private:
  [[noreturn]] void fail(const std::string& what_happened) {
    std::string message = group_->describe_failure(sequence_, description_, what_happened);
    group_->mark_broken(description_ + " " + what_happened);
    KILN_FAIL(message);
  }

  std::shared_ptr<ProcessGroup> group_;
  uint64_t sequence_;  // 0 for send and recv
  std::string description_;
  uint64_t record_id_;
  WorkPtr inner_;
  std::function<void()> finish_;
  std::once_flag finished_;
};

// ---- helpers for the argument checks --------------------------------------------

namespace {

// "float32 [4, 4]": what a fingerprint says of a tensor. The device is left
// out on purpose: rank 1's cuda:1 tensor matches rank 0's cuda:0 tensor.
std::string describe(const Tensor& t) { return detail::str(dtype_name(t.dtype()), ' ', t.shape()); }

// Copies made for non-contiguous tensors, copied back when the work succeeds.
struct CopyBack {
  Tensor target;
  Tensor staged;
};

// A contiguous tensor with `t`'s contents that the backend may write; when a
// copy was needed it is copied back into `t` at the end.
Tensor writable(const Tensor& t, std::vector<CopyBack>& copies) {
  if (t.is_contiguous()) return t;
  Tensor staged = t.contiguous();
  copies.push_back({t, staged});
  return staged;
}

// Tensor is a handle, so writing through a copy of it writes the caller's data.
void copy_into(Tensor target, const Tensor& source) { target.copy_(source); }

void copy_back(const std::vector<CopyBack>& copies) {
  for (const CopyBack& c : copies) copy_into(c.target, c.staged);
}

// What a reduction's wait() finishes with: for an average that the backend
// ran as a sum (it has no ReduceOp::Avg), the division by the group size
// when `divide`; then the copies back into non-contiguous outputs.
std::function<void()> finish_reduction(Tensor buffer, std::vector<CopyBack> copies, bool divide, int size) {
  return [buffer, copies, divide, size]() mutable {
    if (divide) ops::div_(buffer, Scalar(size));
    copy_back(copies);
  };
}

}  // namespace

// ---- construction ---------------------------------------------------------------------

ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)) {
  KILN_CHECK(size >= 1, "ProcessGroup: world size must be at least 1, got ", size);
  KILN_CHECK(rank >= 0 && rank < size, "ProcessGroup: rank ", rank, " is outside the group of size ", size);
  KILN_CHECK(options_.timeout.count() > 0, "ProcessGroup: the timeout must be positive, got ",
             options_.timeout.count(), " ms");
  if (options_.global_ranks.empty()) {
    for (int r = 0; r < size; ++r) options_.global_ranks.push_back(r);
  }
  KILN_CHECK(static_cast<int>(options_.global_ranks.size()) == size, "ProcessGroup: ",
             options_.global_ranks.size(), " global ranks given for a group of size ", size);
  KILN_CHECK(options_.heartbeat_timeout.count() > 0, "ProcessGroup: the heartbeat timeout must be positive, got ",
             options_.heartbeat_timeout.count(), " ms");
  if (store_) progress_ = std::make_unique<CollectiveProgress>(*store_, rank_, size_, options_.heartbeat_timeout);
}

ProcessGroup::~ProcessGroup() = default;

std::chrono::milliseconds ProcessGroup::heartbeat_check_interval() const {
  return progress_ ? progress_->check_interval() : options_.timeout;
}

std::optional<std::string> ProcessGroup::silent_peer() {
  if (!progress_) return std::nullopt;
  return progress_->silent_peer(exact_progress());
}

std::function<std::optional<std::pair<uint64_t, std::string>>(int)> ProcessGroup::exact_progress() const {
  return [this](int rank) -> std::optional<std::pair<uint64_t, std::string>> {
    const std::optional<CollectiveCall> call = last_call_of(rank);
    if (!call) return std::nullopt;
    return std::make_pair(call->sequence, call->describe());
  };
}

int ProcessGroup::global_rank(int group_rank) const {
  KILN_CHECK(group_rank >= 0 && group_rank < size_, "ProcessGroup: rank ", group_rank,
             " is outside group '", name(), "' of size ", size_);
  return options_.global_ranks[group_rank];
}

// ---- the steps every collective takes -------------------------------------------------

void ProcessGroup::check_usable(const std::string& what) const {
  std::lock_guard lock(broken_mutex_);
  KILN_CHECK(broken_.empty(), what, ": group '", name(), "' (", backend_name(), ", rank ", rank_,
             ") cannot be used after an earlier collective failed (", broken_,
             "); the ranks no longer agree on which collective comes next, so destroy the group "
             "and create a new one");
}

void ProcessGroup::mark_broken(const std::string& reason) {
  {
    std::lock_guard lock(broken_mutex_);
    if (!broken_.empty()) return;
    broken_ = reason;
  }
  abort_operations(reason);
}

WorkPtr ProcessGroup::start_collective(const std::string& signature, const std::function<WorkPtr()>& run,
                                       std::function<void()> finish) {
  check_usable(signature);
  const uint64_t sequence = ++sequence_;
  if (progress_) progress_->entered(sequence, signature);
  if (options_.debug && store_) {
    FingerprintMismatch mismatch;
    try {
      mismatch = exchange_fingerprints(*store_, rank_, size_, sequence, signature, options_.timeout,
                                       heartbeat_check_interval(), [this] {
                                         if (std::optional<std::string> silent = silent_peer()) KILN_FAIL(*silent);
                                       });
    } catch (const std::exception& e) {
      mark_broken(signature + " debug check failed");
      KILN_FAIL(describe_failure(sequence, signature,
                                 std::string("debug check: not every rank reached it (") + e.what() + ")"));
    }
    if (mismatch.found) {
      mark_broken(signature + " debug check failed");
      KILN_FAIL(describe_failure(sequence, signature,
                                 detail::str("debug check failed: rank ", rank_, " calls ", signature,
                                             " but rank ", mismatch.other_rank, " calls ",
                                             mismatch.other_fingerprint)));
    }
  }
  WorkPtr inner;
  try {
    inner = run();
  } catch (const std::exception& e) {
    mark_broken(signature + " failed to start");
    KILN_FAIL(describe_failure(sequence, signature, std::string("failed to start: ") + e.what()));
  }
  const uint64_t id = FlightRecorder::instance().record(name(), sequence, signature, inner);
  return std::make_shared<CollectiveWork>(shared_from_this(), sequence, signature, id, std::move(inner),
                                          std::move(finish));
}

WorkPtr ProcessGroup::start_point_to_point(const std::string& description, const std::function<WorkPtr()>& run,
                                           std::function<void()> finish) {
  check_usable(description);
  WorkPtr inner;
  try {
    inner = run();
  } catch (const std::exception& e) {
    KILN_FAIL(describe_failure(0, description, std::string("failed to start: ") + e.what()));
  }
  const uint64_t id = FlightRecorder::instance().record(name(), 0, description, inner);
  return std::make_shared<CollectiveWork>(shared_from_this(), 0, description, id, std::move(inner),
                                          std::move(finish));
}

std::string ProcessGroup::describe_failure(uint64_t sequence, const std::string& collective,
                                           const std::string& what_happened) {
  std::ostringstream os;
  if (sequence) {
    os << "collective #" << sequence << ' ';
  }
  os << collective << " on group '" << name() << "' (" << backend_name() << ", rank " << rank_ << " of "
     << size_;
  if (options_.global_ranks[rank_] != rank_) os << ", world rank " << options_.global_ranks[rank_];
  os << ") " << what_happened << '.';
  if (sequence) {
    if (progress_) {
      os << ' ' << progress_->report(sequence, exact_progress());
    } else {
      os << " This group has no store, so the other ranks' progress is unknown.";
    }
  }
  os << "\nLast operations on this process, oldest first:\n" << FlightRecorder::instance().dump();
  return os.str();
}

// ---- argument checks shared by the collectives -----------------------------------------

namespace {

void check_defined(const Tensor& t, const char* op, const char* what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void check_same_kind(const Tensor& t, const Tensor& reference, const char* op, const char* what) {
  KILN_CHECK(t.dtype() == reference.dtype(), op, ": ", what, " has dtype ", dtype_name(t.dtype()),
             " but the input has ", dtype_name(reference.dtype()));
  KILN_CHECK(t.device() == reference.device(), op, ": ", what, " is on ", t.device(),
             " but the input is on ", reference.device());
}

void check_reduce_op(ReduceOp op, const Tensor& t, const char* name) {
  KILN_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), name,
             ": ReduceOp avg needs a floating-point tensor, got ", dtype_name(t.dtype()));
  KILN_CHECK(t.dtype() != DType::Bool || op == ReduceOp::Max || op == ReduceOp::Min, name,
             ": bool tensors can only be reduced with max (logical or) or min (logical and), not ",
             reduce_op_name(op));
}

void check_list(const std::vector<Tensor>& list, int size, const Tensor& reference, const char* op,
                const char* what) {
  KILN_CHECK(static_cast<int>(list.size()) == size, op, ": ", what, " holds ", list.size(),
             " tensors but the group has ", size, " ranks");
  for (size_t r = 0; r < list.size(); ++r) {
    const std::string name = detail::str(what, "[", r, "]");
    check_defined(list[r], op, name.c_str());
    check_same_kind(list[r], reference, op, name.c_str());
    KILN_CHECK(list[r].shape() == reference.shape(), op, ": ", name, " has shape ", list[r].shape(),
               " but must have shape ", reference.shape());
  }
}

}  // namespace

// ---- the collectives ---------------------------------------------------------------------

WorkPtr ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_defined(tensor, "all_reduce", "the tensor");
  check_device(tensor.device(), "all_reduce");
  check_reduce_op(op, tensor, "all_reduce");
  // The backend writes the tensor from now on: a tensor autograd saved is
  // stale from here (Note [Version counter] in tensor/tensor.h).
  tensor.bump_version();
  std::vector<CopyBack> copies;
  Tensor buffer = writable(tensor, copies);
  const bool as_sum = op == ReduceOp::Avg && !supports_avg();
  const ReduceOp backend_op = as_sum ? ReduceOp::Sum : op;
  return start_collective(
      detail::str("all_reduce(", describe(tensor), ", ", reduce_op_name(op), ")"),
      [&] { return run_all_reduce(buffer, backend_op); }, finish_reduction(buffer, copies, as_sum, size_));
}

WorkPtr ProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_defined(tensor, "broadcast", "the tensor");
  check_device(tensor.device(), "broadcast");
  KILN_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is outside group '", name(),
             "' of size ", size_);
  tensor.bump_version();
  std::vector<CopyBack> copies;
  Tensor buffer = writable(tensor, copies);
  return start_collective(
      detail::str("broadcast(", describe(tensor), ", root ", root, ")"),
      [&] { return run_broadcast(buffer, root); }, [copies] { copy_back(copies); });
}

WorkPtr ProcessGroup::reduce(const Tensor& tensor, int root, ReduceOp op) {
  check_defined(tensor, "reduce", "the tensor");
  check_device(tensor.device(), "reduce");
  check_reduce_op(op, tensor, "reduce");
  KILN_CHECK(root >= 0 && root < size_, "reduce: root ", root, " is outside group '", name(),
             "' of size ", size_);
  if (rank_ == root) tensor.bump_version();
  std::vector<CopyBack> copies;
  Tensor buffer = writable(tensor, copies);
  const bool as_sum = op == ReduceOp::Avg && !supports_avg();
  const ReduceOp backend_op = as_sum ? ReduceOp::Sum : op;
  // Only the root's tensor holds the result; the others' stay unchanged.
  return start_collective(
      detail::str("reduce(", describe(tensor), ", ", reduce_op_name(op), ", root ", root, ")"),
      [&] { return run_reduce(buffer, root, backend_op); },
      finish_reduction(buffer, copies, as_sum && rank_ == root, size_));
}

WorkPtr ProcessGroup::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  check_defined(input, "all_gather", "the input");
  check_device(input.device(), "all_gather");
  check_list(outputs, size_, input, "all_gather", "outputs");
  Tensor source = input.contiguous();
  // flat: (size * input.numel()); rank r's input lands in chunk r.
  Tensor flat = kiln::empty({size_ * input.numel()}, TensorOptions(input.dtype(), input.device()));
  const int64_t n = input.numel();
  return start_collective(
      detail::str("all_gather(", describe(input), ")"), [&] { return run_all_gather(flat, source); },
      [flat, outputs, n] {
        for (size_t r = 0; r < outputs.size(); ++r) {
          copy_into(outputs[r], flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outputs[r].shape()));
        }
      });
}

WorkPtr ProcessGroup::all_gather_into_tensor(const Tensor& output, const Tensor& input) {
  check_defined(input, "all_gather_into_tensor", "the input");
  check_defined(output, "all_gather_into_tensor", "the output");
  check_device(input.device(), "all_gather_into_tensor");
  check_same_kind(output, input, "all_gather_into_tensor", "the output");
  KILN_CHECK(output.numel() == size_ * input.numel(), "all_gather_into_tensor: the output has ",
             output.numel(), " elements but must have ", size_, " x ", input.numel(), " = ",
             size_ * input.numel(), " (group size x input elements)");
  Tensor source = input.contiguous();
  output.bump_version();
  std::vector<CopyBack> copies;
  Tensor buffer = writable(output, copies);
  return start_collective(
      detail::str("all_gather_into_tensor(", describe(input), ")"),
      [&] { return run_all_gather(buffer, source); }, [copies] { copy_back(copies); });
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  check_defined(output, "reduce_scatter", "the output");
  check_device(output.device(), "reduce_scatter");
  check_reduce_op(op, output, "reduce_scatter");
  check_list(inputs, size_, output, "reduce_scatter", "inputs");
  // flat: (size * output.numel()); chunk r is inputs[r].
  const int64_t n = output.numel();
  Tensor flat = kiln::empty({size_ * n}, TensorOptions(output.dtype(), output.device()));
  for (int r = 0; r < size_; ++r) copy_into(flat.narrow(0, r * n, n).view(inputs[r].shape()), inputs[r]);
  return start_reduce_scatter(detail::str("reduce_scatter(", describe(output), ", ", reduce_op_name(op), ")"), output,
                              flat, op);
}

WorkPtr ProcessGroup::reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_defined(output, "reduce_scatter_tensor", "the output");
  check_defined(input, "reduce_scatter_tensor", "the input");
  check_device(output.device(), "reduce_scatter_tensor");
  check_same_kind(output, input, "reduce_scatter_tensor", "the output");
  check_reduce_op(op, output, "reduce_scatter_tensor");
  KILN_CHECK(input.numel() == size_ * output.numel(), "reduce_scatter_tensor: the input has ",
             input.numel(), " elements but must have ", size_, " x ", output.numel(), " = ",
             size_ * output.numel(), " (group size x output elements)");
  return start_reduce_scatter(detail::str("reduce_scatter_tensor(", describe(input), ", ", reduce_op_name(op), ")"),
                              output, input.contiguous(), op);
}

WorkPtr ProcessGroup::start_reduce_scatter(const std::string& signature, const Tensor& output, const Tensor& input,
                                           ReduceOp op) {
  output.bump_version();
  std::vector<CopyBack> copies;
  Tensor buffer = writable(output, copies);
  const bool as_sum = op == ReduceOp::Avg && !supports_avg();
  const ReduceOp backend_op = as_sum ? ReduceOp::Sum : op;
  return start_collective(
      signature, [&] { return run_reduce_scatter(buffer, input, backend_op); },
      finish_reduction(buffer, copies, as_sum, size_));
}

WorkPtr ProcessGroup::gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  check_defined(input, "gather", "the input");
  check_device(input.device(), "gather");
  KILN_CHECK(root >= 0 && root < size_, "gather: root ", root, " is outside group '", name(),
             "' of size ", size_);
  Tensor flat;
  if (rank_ == root) {
    check_list(outputs, size_, input, "gather", "outputs");
    flat = kiln::empty({size_ * input.numel()}, TensorOptions(input.dtype(), input.device()));
  } else {
    KILN_CHECK(outputs.empty(), "gather: rank ", rank_, " is not the root (", root, ") but was given ",
               outputs.size(), " output tensors; only the root receives");
  }
  Tensor source = input.contiguous();
  const int64_t n = input.numel();
  return start_collective(
      detail::str("gather(", describe(input), ", root ", root, ")"),
      [&] { return run_gather(flat, source, root); },
      [flat, outputs, n] {
        for (size_t r = 0; r < outputs.size(); ++r) {
          copy_into(outputs[r], flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outputs[r].shape()));
        }
      });
}

WorkPtr ProcessGroup::scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  check_defined(output, "scatter", "the output");
  check_device(output.device(), "scatter");
  KILN_CHECK(root >= 0 && root < size_, "scatter: root ", root, " is outside group '", name(),
             "' of size ", size_);
  const int64_t n = output.numel();
  Tensor flat;
  if (rank_ == root) {
    check_list(inputs, size_, output, "scatter", "inputs");
    flat = kiln::empty({size_ * n}, TensorOptions(output.dtype(), output.device()));
    for (int r = 0; r < size_; ++r) copy_into(flat.narrow(0, r * n, n).view(inputs[r].shape()), inputs[r]);
  } else {
    KILN_CHECK(inputs.empty(), "scatter: rank ", rank_, " is not the root (", root, ") but was given ",
               inputs.size(), " input tensors; only the root sends");
  }
  output.bump_version();
  std::vector<CopyBack> copies;
  Tensor buffer = writable(output, copies);
  return start_collective(
      detail::str("scatter(", describe(output), ", root ", root, ")"),
      [&] { return run_scatter(buffer, flat, root); }, [copies] { copy_back(copies); });
}

WorkPtr ProcessGroup::all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  KILN_CHECK(!inputs.empty(), "all_to_all: no input tensors given; the group has ", size_, " ranks");
  check_defined(inputs[0], "all_to_all", "inputs[0]");
  check_device(inputs[0].device(), "all_to_all");
  // Every chunk has inputs[0]'s shape: ranks exchange equal chunks.
  check_list(inputs, size_, inputs[0], "all_to_all", "inputs");
  check_list(outputs, size_, inputs[0], "all_to_all", "outputs");
  const int64_t n = inputs[0].numel();
  const TensorOptions options(inputs[0].dtype(), inputs[0].device());
  // send, receive: (size * n); chunk r goes to / comes from rank r.
  Tensor send = kiln::empty({size_ * n}, options);
  for (int r = 0; r < size_; ++r) copy_into(send.narrow(0, r * n, n).view(inputs[r].shape()), inputs[r]);
  Tensor receive = kiln::empty({size_ * n}, options);
  return start_collective(
      detail::str("all_to_all(", describe(inputs[0]), " x ", size_, ")"),
      [&] { return run_all_to_all(receive, send); },
      [receive, outputs, n] {
        for (size_t r = 0; r < outputs.size(); ++r) {
          copy_into(outputs[r], receive.narrow(0, static_cast<int64_t>(r) * n, n).view(outputs[r].shape()));
        }
      });
}

WorkPtr ProcessGroup::barrier() {
  return start_collective("barrier()", [&] { return run_barrier(); }, nullptr);
}

WorkPtr ProcessGroup::isend(const Tensor& tensor, int dst, int tag) {
  check_defined(tensor, "send", "the tensor");
  check_device(tensor.device(), "send");
  KILN_CHECK(dst >= 0 && dst < size_ && dst != rank_, "send: destination rank ", dst,
             " must be another rank of group '", name(), "' (size ", size_, ", this rank ", rank_, ")");
  KILN_CHECK(tag >= 0, "send: the tag must be non-negative, got ", tag);
  Tensor source = tensor.contiguous();
  return start_point_to_point(detail::str("send(", describe(tensor), ") to rank ", dst, " tag ", tag),
                              [&] { return run_send(source, dst, tag); }, nullptr);
}

WorkPtr ProcessGroup::irecv(const Tensor& tensor, int src, int tag) {
  check_defined(tensor, "recv", "the tensor");
  check_device(tensor.device(), "recv");
  KILN_CHECK(src >= 0 && src < size_ && src != rank_, "recv: source rank ", src,
             " must be another rank of group '", name(), "' (size ", size_, ", this rank ", rank_, ")");
  KILN_CHECK(tag >= 0, "recv: the tag must be non-negative, got ", tag);
  tensor.bump_version();
  std::vector<CopyBack> copies;
  Tensor buffer = writable(tensor, copies);
  return start_point_to_point(detail::str("recv(", describe(tensor), ") from rank ", src, " tag ", tag),
                              [&] { return run_recv(buffer, src, tag); }, [copies] { copy_back(copies); });
}

// ---- sub-groups ----------------------------------------------------------------------------

std::shared_ptr<ProcessGroup> ProcessGroup::new_subgroup(const std::vector<int>& ranks,
                                                         ProcessGroupOptions options) {
  check_usable("new_group");
  KILN_CHECK(!ranks.empty(), "new_group: the list of ranks is empty");
  for (size_t i = 0; i < ranks.size(); ++i) {
    KILN_CHECK(ranks[i] >= 0 && ranks[i] < size_, "new_group: rank ", ranks[i], " is outside group '",
               name(), "' of size ", size_);
    KILN_CHECK(i == 0 || ranks[i] > ranks[i - 1], "new_group: ranks must be sorted and unique, got ", ranks);
  }
  // Every rank calls new_subgroup in the same order, so the counter names
  // the same group on every rank.
  ++subgroups_made_;
  if (options.name.empty() || options.name == "default") {
    options.name = (name() == "default" ? std::string("group") : name() + ".group") +
                   std::to_string(subgroups_made_);
  }
  options.global_ranks.clear();
  for (int r : ranks) options.global_ranks.push_back(options_.global_ranks[r]);
  std::shared_ptr<Store> store;
  if (store_) store = std::make_shared<PrefixStore>(options.name, store_);
  return run_new_subgroup(ranks, std::move(store), std::move(options));
}

}  // namespace kiln::distributed
