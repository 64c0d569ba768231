// The launch plan: what this kiln-run starts and what each process is told,
// worked out from the flags (options.h) and the environment kiln-run was
// started in (Note [Launcher environment] in launcher.h).
//
//   LaunchPlan plan = resolve_plan(options, current_environment());
//   std::vector<std::string> env = child_environment(plan, /*local_rank=*/1, current_environment(), port);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/kiln-run/options.h"

namespace kiln::apps::run {

// Name -> value, a copy of a process environment (so that tests pass any).
using Environment = std::map<std::string, std::string>;

// The environment of this process (environ).
Environment current_environment();

// The task a job launcher (mpirun, srun) started this kiln-run as.
struct SchedulerTask {
  std::string launcher;  // "mpirun (Open MPI)", "mpirun (PMI)", "srun (Slurm)"
  int rank = 0;
  int size = 1;
  std::optional<int> local_rank;  // the task's rank among the tasks on its machine
  std::optional<int> local_size;  // the number of tasks on its machine
};

// The task this process is, if a job launcher started it: Open MPI's
// OMPI_COMM_WORLD_RANK/SIZE (LOCAL_RANK/LOCAL_SIZE), else PMI_RANK/PMI_SIZE
// (MPICH's and Intel MPI's Hydra; MPI_LOCALRANKID/MPI_LOCALNRANKS), else
// Slurm's SLURM_PROCID and SLURM_STEP_NUM_TASKS (SLURM_LOCALID, and the
// count for SLURM_NODEID in SLURM_STEP_TASKS_PER_NODE). Slurm counts only
// inside an srun step: a batch script has SLURM_PROCID=0 and SLURM_NTASKS
// set too, but no SLURM_STEP_NUM_TASKS, and is no task of a job. mpirun's
// variables come first because mpirun inside a Slurm allocation leaves the
// allocation's SLURM_* variables in place. Throws kiln::Error naming the
// variable whose value is not a number or out of range.
std::optional<SchedulerTask> detect_scheduler_task(const Environment& env);

// One count per node from Slurm's "2(x3),1" (= 2,2,2,1). Throws kiln::Error
// naming `variable` for a malformed value.
std::vector<int> parse_slurm_tasks_per_node(const std::string& value, const std::string& variable);

struct LaunchPlan {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  // LOCAL_RANK of local process i is local_rank_base + i, LOCAL_WORLD_SIZE
  // is local_world_size: 0 and nproc_per_node, except for a scheduler task
  // run in its own place, which keeps its place on the machine.
  int local_rank_base = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;  // 0: node 0 serves on a free port
  // Node 0 serves the store. The address it listens on: master_addr on a
  // single node (loopback stays loopback), every interface otherwise (so
  // that a name that resolves to 127.0.1.1 on node 0 itself still works).
  bool serves_store = true;
  std::string store_bind_addr = "127.0.0.1";
  double term_timeout = 5.0;
  // KILN_DISTRIBUTED_TIMEOUT and KILN_HEARTBEAT_TIMEOUT for the processes
  // (seconds); unset: whatever kiln-run's own environment holds.
  std::optional<double> timeout;
  std::optional<double> heartbeat_timeout;
  // --bind-cores: per local process, the cores it is bound to (empty: no
  // binding, the processes run where the system puts them).
  std::vector<std::vector<int>> cores;
  std::string program;
  std::vector<std::string> args;
  // How the plan came about, for the first line kiln-run prints when a
  // scheduler chose it (empty otherwise).
  std::string origin;

  int world_size() const { return nnodes * nproc_per_node; }
  int rank_of(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

// Fills in what the flags left unset (from a scheduler task, MASTER_ADDR and
// MASTER_PORT, then the defaults) and checks the whole: node rank below
// nnodes, an address and a non-zero port of node 0 on the other nodes of a
// multi-node job. Throws kiln::Error naming the flag or variable.
// `allowed_cores` (the cores kiln-run may run on, allowed_cores()) is what
// --bind-cores divides among the local processes.
LaunchPlan resolve_plan(const RunOptions& options, const Environment& env, const std::vector<int>& allowed_cores = {});

// The cores this process may run on (sched_getaffinity), in increasing order.
std::vector<int> allowed_cores();

// `cores` divided among `processes` in order: contiguous shares, the first
// (cores % processes) one core larger. Throws kiln::Error naming both counts
// when there are fewer cores than processes.
std::vector<std::vector<int>> share_cores(const std::vector<int>& cores, int processes);

// The environment of local process `local_rank`: `base` with torchrun's
// variables set (MASTER_PORT = `store_port`, the port node 0 really serves
// on) and OMP_NUM_THREADS=1 when more than one process shares the node and
// `base` has none (with --bind-cores, the number of cores the process is
// bound to, also for one process). As "NAME=value" strings for execve.
std::vector<std::string> child_environment(const LaunchPlan& plan, int local_rank, const Environment& base,
                                           uint16_t store_port);

// Whether child_environment() sets OMP_NUM_THREADS (kiln-run says so once).
bool sets_omp_num_threads(const LaunchPlan& plan, const Environment& base);

}  // namespace kiln::apps::run
