#include "distributed/backends/mpi/process_group_mpi.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "distributed/backend_registry.h"
#include "distributed/backends/mpi/mpi_runtime.h"
#include "distributed/backends/mpi/mpi_types.h"
#include "distributed/backends/mpi/operation_queue.h"
#include "distributed/tcp_store.h"
#include "tensor/error.h"

namespace kiln::distributed {

namespace {

using mpi::Operation;

// Posts one non-blocking MPI call; `post` returns its error code.
using Post = std::function<int(MPI_Comm comm, MPI_Request* request)>;

Operation make_operation(std::string name, Operation::Kind kind, const char* mpi_function,
                         std::vector<Tensor> tensors, Post post) {
  Operation op;
  op.kind = kind;
  op.tensors = std::move(tensors);
  op.start = [post = std::move(post), mpi_function, name](MPI_Comm comm) {
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(post(comm, &request), detail::str(mpi_function, " for ", name));
    return request;
  };
  op.name = std::move(name);
  return op;
}

Operation collective(std::string name, const char* mpi_function, std::vector<Tensor> tensors, Post post) {
  return make_operation(std::move(name), Operation::Kind::Collective, mpi_function, std::move(tensors),
                        std::move(post));
}

MPI_Op reduce_op(DType dtype, ReduceOp op, const char* what) {
  auto guard = mpi::lock();  // the 16-bit float ops are created on first use
  return mpi::reduce_op(dtype, op, what);
}

// MPI forbids a send buffer that overlaps the receive buffer (except through
// MPI_IN_PLACE, whose meaning differs per collective); a caller may pass,
// say, a chunk of all_gather's output as its input. Such an input is copied.
Tensor apart_from(const Tensor& input, const Tensor& output) {
  if (!output.defined() || input.nbytes() == 0 || output.nbytes() == 0) return input;
  const auto* in = static_cast<const char*>(input.data_ptr());
  const auto* out = static_cast<const char*>(output.data_ptr());
  const bool overlap = in < out + output.nbytes() && out < in + input.nbytes();
  return overlap ? input.clone() : input;
}

// What rank 0 broadcasts in create_world: "ok <host> <port>" or "error <message>".
constexpr size_t kRendezvousBytes = 4096;

std::string processor_name() {
  std::array<char, MPI_MAX_PROCESSOR_NAME> name{};
  int length = 0;
  auto guard = mpi::lock();
  mpi::check(MPI_Get_processor_name(name.data(), &length), "MPI_Get_processor_name");
  return std::string(name.data(), static_cast<size_t>(length));
}

// Broadcasts `message` (meaningful on rank 0) over `queue`'s communicator
// and returns what rank 0 sent.
std::string broadcast_from_rank0(mpi::OperationQueue& queue, const std::string& message, int rank,
                                 std::chrono::milliseconds timeout) {
  // buffer: (kRendezvousBytes) chars, zero-terminated
  auto buffer = std::make_shared<std::array<char, kRendezvousBytes>>();
  buffer->fill('\0');
  if (rank == 0) std::memcpy(buffer->data(), message.data(), std::min(message.size(), kRendezvousBytes - 1));
  auto work = queue.enqueue(collective("create_world", "MPI_Ibcast", {}, [buffer](MPI_Comm comm, MPI_Request* r) {
    return MPI_Ibcast(buffer->data(), static_cast<int>(kRendezvousBytes), MPI_CHAR, 0, comm, r);
  }));
  KILN_CHECK(work->wait_for(timeout), "mpi: create_world: rank ", rank, " waited ", timeout.count(),
             " ms for rank 0 to send the store's address over MPI; did every process call create_world?");
  return std::string(buffer->data());
}

// The store every rank of the world group reports progress to (see
// create_world in the header for the choice of address).
std::shared_ptr<Store> rendezvous_store(mpi::OperationQueue& queue, int rank, std::chrono::milliseconds timeout) {
  const std::string my_host = processor_name();
  std::shared_ptr<TCPStore> served;
  std::string message;
  if (rank == 0) {
    try {
      served = TCPStore::serve("0.0.0.0", 0, timeout);
      message = detail::str("ok ", my_host, ' ', served->port());
    } catch (const std::exception& e) {
      message = std::string("error ") + e.what();
    }
  }
  message = broadcast_from_rank0(queue, message, rank, timeout);
  std::istringstream in(message);
  std::string status;
  in >> status;
  KILN_CHECK(status == "ok", "mpi: create_world: rank 0 could not start the store the group reports progress "
                             "to: ", message.substr(std::min<size_t>(message.size(), 6)),
             "; pass a store to create_world instead");
  if (rank == 0) return served;
  std::string host;
  int port = 0;
  in >> host >> port;
  if (const char* override_host = std::getenv("KILN_MPI_STORE_HOST"); override_host && *override_host) {
    host = override_host;
  } else if (host == my_host) {
    host = "127.0.0.1";
  }
  return std::make_shared<TCPStore>(host, static_cast<uint16_t>(port), timeout);
}

std::string queue_description(const std::string& group, int rank) {
  return detail::str("group '", group, "', rank ", rank);
}

}  // namespace

// ---- creation ----------------------------------------------------------------------

ProcessGroupMPI::ProcessGroupMPI(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options,
                                 std::unique_ptr<mpi::OperationQueue> queue)
    : ProcessGroup(std::move(store), rank, size, std::move(options)), queue_(std::move(queue)) {}

ProcessGroupMPI::~ProcessGroupMPI() = default;

int ProcessGroupMPI::world_size() {
  mpi::ensure_initialized();
  auto guard = mpi::lock();
  int size = 0;
  mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  return size;
}

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::create_world(ProcessGroupOptions options,
                                                               std::shared_ptr<Store> store,
                                                               int expected_world_size) {
  KILN_CHECK(options.global_ranks.empty(), "mpi: create_world makes the group of all ranks, but ",
             options.global_ranks.size(), " global ranks were given; use new_subgroup for a sub-group");
  const int size = world_size();
  if (expected_world_size > 0 && expected_world_size != size) {
    const bool under_mpirun = mpi::started_by_launcher();
    KILN_FAIL("mpi: world_size ", expected_world_size, " was asked for, but MPI_COMM_WORLD has ", size,
              size == 1 ? " process" : " processes",
              under_mpirun ? detail::str(" (mpirun was told -np ", size, ")")
                           : std::string(" (the program was not started by mpirun, so MPI runs it alone)"),
              "; start it with `mpirun -np ", expected_world_size, " ...`, or leave world_size at -1 to take "
              "MPI's");
  }
  int rank = 0;
  auto comm = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    auto guard = mpi::lock();
    mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    // Non-blocking, so that a rank that never calls create_world is reported
    // after the timeout instead of hanging this one.
    mpi::check(MPI_Comm_idup(MPI_COMM_WORLD, comm.get(), &request), "MPI_Comm_idup");
  }
  if (!mpi::wait_request(request, options.timeout, "MPI_Comm_idup in create_world")) {
    comm.release();  // MPI writes the new communicator there if the others ever arrive
    KILN_FAIL("mpi: create_world: rank ", rank, " waited ", options.timeout.count(), " ms for the other ",
              size - 1, " ranks of MPI_COMM_WORLD to call create_world");
  }
  auto queue =
      std::make_unique<mpi::OperationQueue>(*comm, queue_description(options.name, rank), options.timeout);
  if (!store) store = rendezvous_store(*queue, rank, options.timeout);
  std::shared_ptr<ProcessGroupMPI> group(
      new ProcessGroupMPI(std::move(store), rank, size, std::move(options), std::move(queue)));
  group->wait_for_all_ranks("create_world");
  return group;
}

void ProcessGroupMPI::wait_for_all_ranks(const char* what) {
  // Each rank's ProcessGroup connects to the store as it is constructed. A
  // barrier afterwards keeps rank 0, whose process serves the store, from
  // returning, finishing and closing the store while another rank is still
  // connecting.
  auto barrier = queue_->enqueue(collective(what, "MPI_Ibarrier", {}, [](MPI_Comm comm, MPI_Request* r) {
    return MPI_Ibarrier(comm, r);
  }));
  KILN_CHECK(barrier->wait_for(timeout()), "mpi: ", what, ": rank ", rank(), " of group '", name(), "' waited ",
             timeout().count(), " ms for the other ranks to finish creating the group");
}

std::shared_ptr<ProcessGroup> ProcessGroupMPI::run_new_subgroup(const std::vector<int>& ranks,
                                                                std::shared_ptr<Store> store,
                                                                ProcessGroupOptions options) {
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), rank());
  const bool member = it != ranks.end() && *it == rank();
  const int color = member ? 0 : MPI_UNDEFINED;
  const int key = rank();
  auto split = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  // MPI_Comm_split blocks until every rank of the parent calls it, and MPI
  // cannot time it out. A non-blocking barrier first can: once it completes,
  // every rank is at the split.
  auto barrier = queue_->enqueue(collective("new_group barrier", "MPI_Ibarrier", {}, [](MPI_Comm comm, MPI_Request* r) {
    return MPI_Ibarrier(comm, r);
  }));
  auto work = queue_->enqueue(collective("new_group", "MPI_Comm_split", {}, [=](MPI_Comm comm, MPI_Request* r) {
    *r = MPI_REQUEST_NULL;
    return MPI_Comm_split(comm, color, key, split.get());
  }));
  KILN_CHECK(barrier->wait_for(timeout()), "mpi: new_group: rank ", rank(), " of group '", name(), "' waited ",
             timeout().count(), " ms for the other ranks to call new_group (", options.name,
             "); MPI cannot take the call back, so the job should be aborted (ProcessGroupMPI::abort)");
  KILN_CHECK(work->wait_for(timeout()), "mpi: new_group: rank ", rank(), " of group '", name(),
             "': MPI_Comm_split did not return within ", timeout().count(), " ms");
  if (!member) return nullptr;
  const int new_rank = static_cast<int>(it - ranks.begin());
  auto queue = std::make_unique<mpi::OperationQueue>(*split, queue_description(options.name, new_rank),
                                                     options.timeout);
  std::shared_ptr<ProcessGroupMPI> group(new ProcessGroupMPI(std::move(store), new_rank,
                                                             static_cast<int>(ranks.size()), std::move(options),
                                                             std::move(queue)));
  group->wait_for_all_ranks("new_group");
  return group;
}

void ProcessGroupMPI::check_device(const Device& device, const char* op) const {
  KILN_CHECK(device.is_cpu(), "mpi: ", op, " got a tensor on ", device, "; CUDA tensors are not supported by "
             "this build's MPI backend; use nccl, or move the tensor to the CPU");
}

void ProcessGroupMPI::abort(int code) const { mpi::abort_job(code); }

// ---- collectives ---------------------------------------------------------------------

WorkPtr ProcessGroupMPI::run_all_reduce(const Tensor& tensor, ReduceOp op) {
  void* data = tensor.data_ptr();
  const int n = mpi::count(tensor.numel(), "all_reduce");
  const MPI_Datatype type = mpi::datatype(tensor.dtype());
  const MPI_Op mpi_op = reduce_op(tensor.dtype(), op, "all_reduce");
  return queue_->enqueue(collective("all_reduce", "MPI_Iallreduce", {tensor}, [=](MPI_Comm comm, MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, data, n, type, mpi_op, comm, r);
  }));
}

WorkPtr ProcessGroupMPI::run_broadcast(const Tensor& tensor, int root) {
  void* data = tensor.data_ptr();
  const int n = mpi::count(tensor.numel(), "broadcast");
  const MPI_Datatype type = mpi::datatype(tensor.dtype());
  return queue_->enqueue(collective("broadcast", "MPI_Ibcast", {tensor}, [=](MPI_Comm comm, MPI_Request* r) {
    return MPI_Ibcast(data, n, type, root, comm, r);
  }));
}

WorkPtr ProcessGroupMPI::run_reduce(const Tensor& tensor, int root, ReduceOp op) {
  void* data = tensor.data_ptr();
  const int n = mpi::count(tensor.numel(), "reduce");
  const MPI_Datatype type = mpi::datatype(tensor.dtype());
  const MPI_Op mpi_op = reduce_op(tensor.dtype(), op, "reduce");
  const bool is_root = rank() == root;
  // The root reduces in place; elsewhere the tensor is only sent, so it keeps
  // its values.
  return queue_->enqueue(collective("reduce", "MPI_Ireduce", {tensor}, [=](MPI_Comm comm, MPI_Request* r) {
    if (is_root) return MPI_Ireduce(MPI_IN_PLACE, data, n, type, mpi_op, root, comm, r);
    return MPI_Ireduce(data, nullptr, n, type, mpi_op, root, comm, r);
  }));
}

WorkPtr ProcessGroupMPI::run_all_gather(const Tensor& output, const Tensor& input) {
  const Tensor source = apart_from(input, output);
  const void* in = source.data_ptr();
  void* out = output.data_ptr();
  const int n = mpi::count(source.numel(), "all_gather");
  const MPI_Datatype type = mpi::datatype(source.dtype());
  return queue_->enqueue(
      collective("all_gather", "MPI_Iallgather", {output, source}, [=](MPI_Comm comm, MPI_Request* r) {
        return MPI_Iallgather(in, n, type, out, n, type, comm, r);
      }));
}

WorkPtr ProcessGroupMPI::run_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  const Tensor source = apart_from(input, output);
  const void* in = source.data_ptr();
  void* out = output.data_ptr();
  const int n = mpi::count(output.numel(), "reduce_scatter");
  const MPI_Datatype type = mpi::datatype(output.dtype());
  const MPI_Op mpi_op = reduce_op(output.dtype(), op, "reduce_scatter");
  return queue_->enqueue(collective("reduce_scatter", "MPI_Ireduce_scatter_block", {output, source},
                                    [=](MPI_Comm comm, MPI_Request* r) {
                                      return MPI_Ireduce_scatter_block(in, out, n, type, mpi_op, comm, r);
                                    }));
}

WorkPtr ProcessGroupMPI::run_gather(const Tensor& output, const Tensor& input, int root) {
  const Tensor source = apart_from(input, output);
  const void* in = source.data_ptr();
  void* out = output.defined() ? output.data_ptr() : nullptr;  // the root's only
  const int n = mpi::count(source.numel(), "gather");
  const MPI_Datatype type = mpi::datatype(source.dtype());
  return queue_->enqueue(collective("gather", "MPI_Igather", {output, source}, [=](MPI_Comm comm, MPI_Request* r) {
    return MPI_Igather(in, n, type, out, n, type, root, comm, r);
  }));
}

WorkPtr ProcessGroupMPI::run_scatter(const Tensor& output, const Tensor& input, int root) {
  const Tensor source = input.defined() ? apart_from(input, output) : input;  // the root's only
  const void* in = source.defined() ? source.data_ptr() : nullptr;
  void* out = output.data_ptr();
  const int n = mpi::count(output.numel(), "scatter");
  const MPI_Datatype type = mpi::datatype(output.dtype());
  return queue_->enqueue(
      collective("scatter", "MPI_Iscatter", {output, source}, [=](MPI_Comm comm, MPI_Request* r) {
        return MPI_Iscatter(in, n, type, out, n, type, root, comm, r);
      }));
}

WorkPtr ProcessGroupMPI::run_all_to_all(const Tensor& output, const Tensor& input) {
  const Tensor source = apart_from(input, output);
  const void* in = source.data_ptr();
  void* out = output.data_ptr();
  const int chunk = mpi::count(output.numel() / size(), "all_to_all");
  const MPI_Datatype type = mpi::datatype(output.dtype());
  return queue_->enqueue(
      collective("all_to_all", "MPI_Ialltoall", {output, source}, [=](MPI_Comm comm, MPI_Request* r) {
        return MPI_Ialltoall(in, chunk, type, out, chunk, type, comm, r);
      }));
}

WorkPtr ProcessGroupMPI::run_barrier() {
  return queue_->enqueue(collective("barrier", "MPI_Ibarrier", {}, [](MPI_Comm comm, MPI_Request* r) {
    return MPI_Ibarrier(comm, r);
  }));
}

// ---- point to point ---------------------------------------------------------------------

namespace {

// MPI guarantees tags up to 32767; the largest one is the communicator's
// MPI_TAG_UB attribute (2^31 - 1 in Open MPI).
int largest_tag(MPI_Comm comm) {
  auto guard = mpi::lock();
  void* value = nullptr;
  int found = 0;
  mpi::check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &value, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
  return found ? *static_cast<int*>(value) : 32767;
}

}  // namespace

WorkPtr ProcessGroupMPI::run_send(const Tensor& tensor, int dst, int tag) {
  const int tag_ub = largest_tag(queue_->comm());
  KILN_CHECK(tag <= tag_ub, "mpi: send to rank ", dst, ": tag ", tag, " is above this MPI's largest tag ", tag_ub);
  const void* data = tensor.data_ptr();
  const int n = mpi::count(tensor.numel(), "send");
  const MPI_Datatype type = mpi::datatype(tensor.dtype());
  return queue_->enqueue(make_operation(detail::str("send to rank ", dst, " (tag ", tag, ")"),
                                        Operation::Kind::PointToPoint, "MPI_Isend", {tensor},
                                        [=](MPI_Comm comm, MPI_Request* r) {
                                          return MPI_Isend(data, n, type, dst, tag, comm, r);
                                        }));
}

WorkPtr ProcessGroupMPI::run_recv(const Tensor& tensor, int src, int tag) {
  const int tag_ub = largest_tag(queue_->comm());
  KILN_CHECK(tag <= tag_ub, "mpi: recv from rank ", src, ": tag ", tag, " is above this MPI's largest tag ", tag_ub);
  void* data = tensor.data_ptr();
  const int n = mpi::count(tensor.numel(), "recv");
  const MPI_Datatype type = mpi::datatype(tensor.dtype());
  const std::string name = detail::str("recv from rank ", src, " (tag ", tag, ")");
  Operation op = make_operation(name, Operation::Kind::PointToPoint, "MPI_Irecv", {tensor},
                                [=](MPI_Comm comm, MPI_Request* r) {
                                  return MPI_Irecv(data, n, type, src, tag, comm, r);
                                });
  // A longer message fails the recv with MPI_ERR_TRUNCATE (MPI_Test reports
  // it); a shorter one would leave the end of the tensor stale, so it fails too.
  const DType dtype = tensor.dtype();
  const int my_rank = rank();
  op.check_status = [=](const MPI_Status& status) {
    int received = 0;
    mpi::check(MPI_Get_count(&status, type, &received), "MPI_Get_count for " + name);
    KILN_CHECK(received == n, "mpi: ", name, " on rank ", my_rank, ": expected ", n, " ", dtype_name(dtype),
               " elements but rank ", src, " sent ", received);
  };
  return queue_->enqueue(std::move(op));
}

// Registered when libkiln_mpi loads (distributed/backend_registry.h): mpirun
// has already fixed rank and size, which create_world asks MPI for.
namespace {
[[maybe_unused]] const bool mpi_registered = [] {
  ProcessGroupBackend backend;
  backend.create = [](std::shared_ptr<Store> store, int rank, int world_size, ProcessGroupOptions options) {
    auto group = ProcessGroupMPI::create_world(options, std::move(store), world_size);
    KILN_CHECK(rank < 0 || rank == group->rank(), "init_process_group('mpi'): rank ", rank,
               " was given but MPI says this process is rank ", group->rank());
    return std::shared_ptr<ProcessGroup>(std::move(group));
  };
  backend.launcher_world_size = [] { return ProcessGroupMPI::world_size(); };
  register_process_group_backend("mpi", std::move(backend));
  return true;
}();
}  // namespace

}  // namespace kiln::distributed
