#include "distributed/backends/nccl/process_group_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include "distributed/backend_registry.h"
#include "distributed/backends/nccl/communicator.h"
#include "distributed/backends/nccl/event_work.h"
#include "distributed/backends/nccl/nccl_check.h"
#include "distributed/backends/nccl/nccl_types.h"
#include "tensor/backend.h"
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::distributed {

namespace {

// ---- construction (Note [NCCL rendezvous]) ---------------------------------------------

std::string member_description(const std::string& group, int rank, int size, Device device) {
  return detail::str("group '", group, "' (rank ", rank, " of ", size, " on ", device, ")");
}

// The CUDA device current on the constructing thread: the group's (see the header).
Device current_device(const std::string& group) {
  KILN_CHECK(cuda::device_count() > 0, "nccl: group '", group,
             "' needs a CUDA device, but this process sees none; the nccl backend moves CUDA tensors "
             "between GPUs (use the gloo backend for CPU tensors)");
  int index = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&index));
  return cuda_device(index);
}

ncclUniqueId exchange_unique_id(Store& store, int rank, int size, const ProcessGroupOptions& options) {
  ncclUniqueId id{};
  try {
    const int64_t generation = (store.add("nccl/groups", 1) - 1) / size;
    const std::string key = detail::str("nccl/", generation, "/unique_id");
    if (rank == 0) {
      KILN_NCCL_CHECK(ncclGetUniqueId(&id));
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store.set(key, std::vector<uint8_t>(bytes, bytes + sizeof id));
    } else {
      store.wait({key}, options.timeout);
      const std::vector<uint8_t> bytes = store.get(key);
      KILN_CHECK(bytes.size() == sizeof id, "the value under '", key, "' has ", bytes.size(), " bytes, not the ",
                 sizeof id, " of an ncclUniqueId");
      std::memcpy(&id, bytes.data(), sizeof id);
    }
  } catch (const std::exception& e) {
    KILN_FAIL("nccl: rank ", rank, " of group '", options.name, "' (size ", size, ") could not ",
              rank == 0 ? "publish" : "read", " NCCL's unique id through ", store.describe(), " within ",
              options.timeout.count(), " ms",
              rank == 0 ? "" : " (rank 0 publishes it when it creates the group; did it?)", ": ", e.what());
  }
  return id;
}

std::shared_ptr<nccl::Communicator> connect(const std::shared_ptr<Store>& store, int rank, int size,
                                            const ProcessGroupOptions& options, Device device) {
  KILN_CHECK(store != nullptr, "nccl: group '", options.name,
             "' needs a store for its ranks to share NCCL's unique id, and none was given");
  // NCCL binds the communicator to the device current when it is created.
  cuda::DeviceGuard guard(device, "nccl");
  const ncclUniqueId id = exchange_unique_id(*store, rank, size, options);
  return nccl::Communicator::create(id, rank, size, member_description(options.name, rank, size, device),
                                    options.timeout);
}

// ---- handing tensors to NCCL ----------------------------------------------------------

size_t count(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// The address `offset` bytes into t's data.
char* bytes_at(const Tensor& t, size_t offset) { return static_cast<char*>(t.data_ptr()) + offset; }

bool overlap(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* x = bytes_at(a, 0);
  const char* y = bytes_at(b, 0);
  return x < y + b.nbytes() && y < x + a.nbytes();
}

// Note [NCCL streams]: t's memory is not reused before the NCCL stream is past
// what was queued on it so far.
void record_on(const Tensor& t, const cuda::Stream& stream) {
  if (!t.defined()) return;
  try {
    cuda::record_stream(t, stream);
  } catch (const Error&) {
    // Memory the caching allocator did not hand out (Storage::from_blob): it
    // has no reuse to hold back; the memory's owner keeps it alive, and the
    // Work keeps the tensor, until wait() returns.
  }
}

// Queues a device-to-device copy on the NCCL stream: a rank's own chunk of
// gather, scatter and all_to_all, which needs no message.
void copy_on(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return;
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

// Runs `calls` between ncclGroupStart and ncclGroupEnd, so that NCCL runs
// those sends and receives together: one at a time, a send could wait for a
// receiver that is itself waiting for its own send to complete.
template <class Calls>
void grouped(Calls&& calls) {
  KILN_NCCL_CHECK(ncclGroupStart());
  try {
    calls();
  } catch (...) {
    // Close the group, or this thread's next NCCL calls would join it.
    (void)ncclGroupEnd();
    throw;
  }
  KILN_NCCL_CHECK_ISSUED(ncclGroupEnd());
}

}  // namespace

// ---- construction -------------------------------------------------------------------------

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(store, rank, size, options),
      device_(current_device(options.name)),
      stream_(cuda::Stream::create(device_, /*priority=*/-1)),
      comm_(connect(store, rank, size, options, device_)) {}

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                   Device device, std::shared_ptr<nccl::Communicator> comm)
    : ProcessGroup(std::move(store), rank, size, std::move(options)),
      device_(device),
      stream_(cuda::Stream::create(device, /*priority=*/-1)),
      comm_(std::move(comm)) {}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  // Everything issued is on the one NCCL stream, so the last operation's
  // event covers all of them. Nothing here may throw.
  try {
    // An aborted communicator has ended its kernels already.
    if (last_done_ && comm_->aborted_because().empty()) {
      cuda::DeviceGuard guard(device_, "nccl");
      const auto deadline = std::chrono::steady_clock::now() + timeout();
      while (!last_done_->query()) {
        comm_->check_async_error("destroying the group");
        if (std::chrono::steady_clock::now() >= deadline) {
          comm_->abort("the group was destroyed while its last operation was still running");
          KILN_FAIL("its last operation was still running ", timeout().count(),
                    " ms after the group began to be destroyed; the communicator was aborted");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: nccl: destroying group '%s' (rank %d of %d): %s\n", name().c_str(), rank(), size(),
                 e.what());
  }
  comm_->close();
}

void ProcessGroupNCCL::check_device(const Device& device, const char* op) const {
  KILN_CHECK(device.is_cuda(), "nccl: ", op, ": CPU tensors cannot be used with the nccl backend, which moves "
             "CUDA memory only (got a tensor on ", device, "); use the gloo backend for CPU tensors, or move the "
             "tensor to ", device_);
  KILN_CHECK(device == device_, "nccl: ", op, ": group '", name(), "' (rank ", rank(), ") runs on ", device_,
             " but got a tensor on ", device, "; a process drives the one GPU that was current when its group was "
             "created (LOCAL_RANK's, under kiln-run)");
  // Here, before the front-end queues anything or issues the collective
  // (a failure there breaks the group).
  refuse_capture(op);
}

void ProcessGroupNCCL::refuse_capture(const std::string& op) const {
  KILN_CHECK(!capturing(device_), "nccl: ", op, " on rank ", rank(), " of group '", name(), "': ", device_,
             " is capturing a CUDA graph; collectives cannot be captured (run them outside the graph)");
}

std::shared_ptr<ProcessGroup> ProcessGroupNCCL::run_new_subgroup(const std::vector<int>& ranks,
                                                                 std::shared_ptr<Store> store,
                                                                 ProcessGroupOptions options) {
  const auto member = std::find(ranks.begin(), ranks.end(), rank());
  const bool is_member = member != ranks.end();
  const int sub_rank = static_cast<int>(member - ranks.begin());
  const int sub_size = static_cast<int>(ranks.size());
  const std::string description =
      is_member ? member_description(options.name, sub_rank, sub_size, device_)
                : detail::str("group '", options.name, "' (which rank ", rank(), " of '", name(), "' is not in)");
  std::shared_ptr<nccl::Communicator> comm;
  {
    std::lock_guard lock(launch_mutex_);
    cuda::DeviceGuard guard(device_, "nccl new_group");
    // The key is the rank in this group: `ranks` is sorted, so rank i of the
    // new communicator is ranks[i], as the front-end's global_ranks say.
    comm = comm_->split(is_member, rank(), description, options.timeout);
  }
  if (!is_member) return nullptr;
  return std::shared_ptr<ProcessGroup>(
      new ProcessGroupNCCL(std::move(store), sub_rank, sub_size, std::move(options), device_, std::move(comm)));
}

// ---- issuing on the NCCL stream (Note [NCCL streams]) -----------------------------------------

WorkPtr ProcessGroupNCCL::launch(const std::string& what, std::vector<Tensor> tensors,
                                 const std::function<void(ncclComm_t comm, cudaStream_t stream)>& issue) {
  // The collectives that take a tensor were refused in check_device; this
  // catches the barrier, which breaks the group.
  refuse_capture(what);
  std::lock_guard lock(launch_mutex_);
  cuda::DeviceGuard guard(device_, "nccl");
  cuda::Event ready;
  ready.record(cuda::current_stream(device_));
  ready.block(stream_);
  for (const Tensor& t : tensors) record_on(t, stream_);
  const cudaStream_t stream = stream_.handle();
  comm_->run(what, [&](ncclComm_t comm) { issue(comm, stream); });
  auto done = std::make_shared<cuda::Event>();
  done->record(stream_);
  last_done_ = done;
  return std::make_shared<nccl::EventWork>(what, comm_, std::move(done), device_, std::move(tensors));
}

// ---- collectives ---------------------------------------------------------------------------------
// NCCL is not called for tensors of zero elements: every rank has the same
// count, so every rank skips the call.

WorkPtr ProcessGroupNCCL::run_all_reduce(const Tensor& tensor, ReduceOp op) {
  const ncclDataType_t type = nccl::datatype(tensor.dtype());
  const ncclRedOp_t nccl_op = nccl::reduce_op(tensor.dtype(), op, "all_reduce");
  return launch("all_reduce", {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (tensor.numel() == 0) return;
    KILN_NCCL_CHECK_ISSUED(
        ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), count(tensor), type, nccl_op, comm, stream));
  });
}

WorkPtr ProcessGroupNCCL::run_broadcast(const Tensor& tensor, int root) {
  const ncclDataType_t type = nccl::datatype(tensor.dtype());
  return launch("broadcast", {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (tensor.numel() == 0) return;
    KILN_NCCL_CHECK_ISSUED(
        ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), count(tensor), type, root, comm, stream));
  });
}

WorkPtr ProcessGroupNCCL::run_reduce(const Tensor& tensor, int root, ReduceOp op) {
  const ncclDataType_t type = nccl::datatype(tensor.dtype());
  const ncclRedOp_t nccl_op = nccl::reduce_op(tensor.dtype(), op, "reduce");
  // In place: NCCL writes the receive buffer on the root only, so the other
  // ranks' tensors keep their values.
  return launch("reduce", {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (tensor.numel() == 0) return;
    KILN_NCCL_CHECK_ISSUED(
        ncclReduce(tensor.data_ptr(), tensor.data_ptr(), count(tensor), type, nccl_op, root, comm, stream));
  });
}

WorkPtr ProcessGroupNCCL::run_all_gather(const Tensor& output, const Tensor& input) {
  // output: (size * n), input: (n). NCCL gathers in place when the input is
  // this rank's chunk of the output; any other overlap is undefined, so such
  // an input is copied first (on the caller's stream, before the NCCL stream
  // is ordered after it).
  Tensor source = input;
  if (overlap(input, output) && bytes_at(input, 0) != bytes_at(output, rank() * input.nbytes())) {
    source = input.clone();
  }
  const ncclDataType_t type = nccl::datatype(source.dtype());
  return launch("all_gather", {output, source}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (source.numel() == 0) return;
    KILN_NCCL_CHECK_ISSUED(ncclAllGather(source.data_ptr(), output.data_ptr(), count(source), type, comm, stream));
  });
}

WorkPtr ProcessGroupNCCL::run_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  // input: (size * n), output: (n). In place when the output is this rank's
  // chunk of the input; other overlaps are copied away as in all_gather.
  Tensor source = input;
  if (overlap(input, output) && bytes_at(output, 0) != bytes_at(input, rank() * output.nbytes())) {
    source = input.clone();
  }
  const ncclDataType_t type = nccl::datatype(output.dtype());
  const ncclRedOp_t nccl_op = nccl::reduce_op(output.dtype(), op, "reduce_scatter");
  return launch("reduce_scatter", {output, source}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (output.numel() == 0) return;
    KILN_NCCL_CHECK_ISSUED(
        ncclReduceScatter(source.data_ptr(), output.data_ptr(), count(output), type, nccl_op, comm, stream));
  });
}

WorkPtr ProcessGroupNCCL::run_gather(const Tensor& output, const Tensor& input, int root) {
  // input: (n); output: (size * n) on the root, chunk r from rank r; undefined elsewhere.
  const ncclDataType_t type = nccl::datatype(input.dtype());
  const int me = rank();
  const int size = this->size();
  return launch("gather", {output, input}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (input.numel() == 0) return;
    const size_t n = count(input);
    const size_t chunk = input.nbytes();
    if (me != root) {
      KILN_NCCL_CHECK_ISSUED(ncclSend(input.data_ptr(), n, type, root, comm, stream));
      return;
    }
    // The root's own chunk is a copy, queued before the NCCL calls: the
    // stream may take other work only once NCCL has taken its calls
    // (Note [NCCL timeouts]).
    copy_on(bytes_at(output, root * chunk), input.data_ptr(), chunk, stream);
    grouped([&] {
      for (int r = 0; r < size; ++r) {
        if (r != root) KILN_NCCL_CHECK_ISSUED(ncclRecv(bytes_at(output, r * chunk), n, type, r, comm, stream));
      }
    });
  });
}

WorkPtr ProcessGroupNCCL::run_scatter(const Tensor& output, const Tensor& input, int root) {
  // output: (n); input: (size * n) on the root, chunk r for rank r; undefined elsewhere.
  const ncclDataType_t type = nccl::datatype(output.dtype());
  const int me = rank();
  const int size = this->size();
  return launch("scatter", {output, input}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (output.numel() == 0) return;
    const size_t n = count(output);
    const size_t chunk = output.nbytes();
    if (me != root) {
      KILN_NCCL_CHECK_ISSUED(ncclRecv(output.data_ptr(), n, type, root, comm, stream));
      return;
    }
    copy_on(output.data_ptr(), bytes_at(input, root * chunk), chunk, stream);
    grouped([&] {
      for (int r = 0; r < size; ++r) {
        if (r != root) KILN_NCCL_CHECK_ISSUED(ncclSend(bytes_at(input, r * chunk), n, type, r, comm, stream));
      }
    });
  });
}

WorkPtr ProcessGroupNCCL::run_all_to_all(const Tensor& output, const Tensor& input) {
  // input, output: (size * n); input chunk r goes to rank r, output chunk r
  // comes from rank r. The front-end gives two separate buffers.
  const ncclDataType_t type = nccl::datatype(output.dtype());
  const int me = rank();
  const int size = this->size();
  return launch("all_to_all", {output, input}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (output.numel() == 0) return;
    const size_t n = count(output) / static_cast<size_t>(size);
    const size_t chunk = output.nbytes() / static_cast<size_t>(size);
    copy_on(bytes_at(output, me * chunk), bytes_at(input, me * chunk), chunk, stream);
    grouped([&] {
      for (int r = 0; r < size; ++r) {
        if (r == me) continue;
        KILN_NCCL_CHECK_ISSUED(ncclSend(bytes_at(input, r * chunk), n, type, r, comm, stream));
        KILN_NCCL_CHECK_ISSUED(ncclRecv(bytes_at(output, r * chunk), n, type, r, comm, stream));
      }
    });
  });
}

WorkPtr ProcessGroupNCCL::run_barrier() {
  // As PyTorch's: an all_reduce of one element, which completes on a rank
  // only once every rank has joined it.
  const Tensor token = zeros({1}, TensorOptions(DType::Float32, device_));
  return launch("barrier", {token}, [&](ncclComm_t comm, cudaStream_t stream) {
    KILN_NCCL_CHECK_ISSUED(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, comm, stream));
  });
}

// ---- point to point (Note [NCCL point to point]) ------------------------------------------------

WorkPtr ProcessGroupNCCL::run_send(const Tensor& tensor, int dst, int) {
  const ncclDataType_t type = nccl::datatype(tensor.dtype());
  return launch(detail::str("send to rank ", dst), {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (tensor.numel() == 0) return;
    KILN_NCCL_CHECK_ISSUED(ncclSend(tensor.data_ptr(), count(tensor), type, dst, comm, stream));
  });
}

WorkPtr ProcessGroupNCCL::run_recv(const Tensor& tensor, int src, int) {
  const ncclDataType_t type = nccl::datatype(tensor.dtype());
  return launch(detail::str("recv from rank ", src), {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
    if (tensor.numel() == 0) return;
    KILN_NCCL_CHECK_ISSUED(ncclRecv(tensor.data_ptr(), count(tensor), type, src, comm, stream));
  });
}

// Registered when libkiln_nccl loads (distributed/backend_registry.h).
namespace {
[[maybe_unused]] const bool nccl_registered = [] {
  register_process_group_backend(
      "nccl", {[](std::shared_ptr<Store> store, int rank, int world_size, ProcessGroupOptions options) {
                 return std::make_shared<ProcessGroupNCCL>(std::move(store), rank, world_size, options);
               },
               {}});
  return true;
}();
}  // namespace

}  // namespace kiln::distributed
