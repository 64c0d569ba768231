// The default process group: torch.distributed's module-level API.
//
//   // every process of the job, e.g. started by kiln-run --nproc-per-node 2:
//   distributed::init_process_group("gloo");          // env:// reads RANK, WORLD_SIZE, ...
//   distributed::all_reduce(grad);                     // blocking sum over all ranks
//   auto work = distributed::default_group().all_reduce(grad);  // or asynchronous
//   distributed::destroy_process_group();
//
// init_method says how processes find each other (Note [Store]):
// - "env://": MASTER_ADDR and MASTER_PORT name the TCP store; RANK and
//   WORLD_SIZE give this process's place when the arguments are -1 (what
//   torchrun and kiln-run set). Rank 0 serves the store, unless
//   KILN_STORE_SERVED_BY_LAUNCHER=1 says kiln-run already does.
// - "tcp://HOST:PORT": the same store at an explicit address; rank and
//   world_size must be given.
// - "file:///PATH": a FileStore at PATH on a file system every rank sees;
//   world_size must be given (and rank).
// The "mpi" backend takes rank and size from MPI (mpirun) and needs no
// init_method.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/store.h"

namespace kiln::distributed {

// Creates the default group of all processes. Throws kiln::Error naming the
// backend, init method or variable that is wrong, or the rendezvous that
// did not complete within `timeout`.
//
// `timeout` bounds the rendezvous and every collective; zero means
// KILN_DISTRIBUTED_TIMEOUT (seconds) when set, else kDefaultTimeout (5 min).
// `heartbeat_timeout` is how long a silent peer (stopped, hung) is waited for
// before it is named (Note [Heartbeat]); zero means KILN_HEARTBEAT_TIMEOUT
// (seconds) when set, else kDefaultHeartbeatTimeout (10 s).
void init_process_group(const std::string& backend, const std::string& init_method = "env://",
                        int world_size = -1, int rank = -1,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                        std::chrono::milliseconds heartbeat_timeout = std::chrono::milliseconds(0));

// The timeouts init_process_group uses for zero arguments: the environment
// variable (seconds, > 0, finite) or the default. Throws kiln::Error naming
// the variable when it is set to something else.
std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds given);
std::chrono::milliseconds heartbeat_timeout_from_env(std::chrono::milliseconds given);

// The store `init_method` names, as init_process_group would make it; also
// fills in `world_size` and `rank` when they are -1 and the method knows them.
std::shared_ptr<Store> make_store(const std::string& init_method, int& world_size, int& rank,
                                  std::chrono::milliseconds timeout);

// A group of `backend` over `store` (what init_process_group uses; tests use
// it to make groups without touching the default one).
std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, std::shared_ptr<Store> store,
                                                 int world_size, int rank, ProcessGroupOptions options);

// The backends this build has, e.g. {"gloo", "mpi"}.
std::vector<std::string> available_backends();

bool is_initialized();
ProcessGroup& default_group();  // throws if init_process_group was not called
std::shared_ptr<ProcessGroup> default_group_ptr();
int get_rank();
int get_world_size();
void destroy_process_group();

// A sub-group of the world over `ranks` (world ranks, sorted). Every process
// must call it, members or not, in the same order; returns null on
// non-members. The timeout defaults to the world group's.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks,
                                        std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// Blocking collectives on `group` (the default group when null).
void barrier(ProcessGroup* group = nullptr);
void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
void broadcast(const Tensor& tensor, int root, ProcessGroup* group = nullptr);
void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, ProcessGroup* group = nullptr);

}  // namespace kiln::distributed
