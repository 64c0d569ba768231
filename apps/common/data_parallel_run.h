// The processes of a data-parallel training run (kiln-lenet and kiln-gpt
// with --ddp or --fsdp) as the app sees them: the default process group,
// this process's rank, and the agreements the ranks make so that none is
// left waiting alone in a collective (whether rank 0 can write its outputs).
//
//   DataParallelRun dp = start_data_parallel({.backend = "gloo"}, "--ddp");
//   check_outputs_on_main({{"--save", path}}, dp);   // every rank learns rank 0's problem
//   ...
//   finish_data_parallel(dp);
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/process_group.h"

namespace CLI {
class App;
}

namespace kiln::apps {

struct DataParallelRun {
  std::shared_ptr<distributed::ProcessGroup> group;  // null in one process
  int rank = 0;
  int world_size = 1;
  bool initialized_here = false;  // this run called init_process_group
  // Processes on this machine (LOCAL_WORLD_SIZE, else all of them).
  int local_world_size = 1;

  bool is_main() const { return rank == 0; }
};

// How to join the process group: the flags --backend, --timeout and
// --heartbeat-timeout (seconds; 0: KILN_DISTRIBUTED_TIMEOUT /
// KILN_HEARTBEAT_TIMEOUT, else the defaults of distributed/init.h).
struct ProcessGroupFlags {
  std::string backend = "gloo";
  double timeout = 0;
  double heartbeat_timeout = 0;
};

// No run comes near it; above it seconds x 1000 (the milliseconds
// init_process_group takes) would overflow int64.
inline constexpr double kMaxTimeoutSeconds = 1e9;

// Checks of the process-group flags both trainers make: --backend is gloo,
// mpi or nccl, and other than gloo only when `distributed` (--ddp or
// --fsdp); --timeout and --heartbeat-timeout are 0 (the default) or
// seconds up to kMaxTimeoutSeconds, and other than 0 only when
// `distributed`. Throws kiln::Error naming the flag and its value.
void check_process_group_flags(const ProcessGroupFlags& flags, bool distributed);

// An app's options behind the flags that choose how its processes train
// together (both trainers' options hold these fields).
struct DataParallelFlagTargets {
  bool& ddp;
  bool& fsdp;
  std::string& fsdp_strategy;  // parse_sharding_strategy's spellings
  std::string& backend;
};

// Registers --ddp, --fsdp, --fsdp-strategy and --backend on `app`, writing
// into `targets`; `command` is how the app is called ("kiln-gpt train"),
// for --ddp's help. The checks are the app's validate() (with
// check_process_group_flags and check_fsdp_flags, sharded_training.h).
//
//   add_data_parallel_flags(app, {o.ddp, o.fsdp, o.fsdp_strategy, o.backend}, "kiln-lenet");
void add_data_parallel_flags(CLI::App& app, const DataParallelFlagTargets& targets, const std::string& command);

// Joins the default process group through env:// (the variables kiln-run
// sets), or reuses it when the program (a test) has already joined one.
// Throws naming `mode_flag` ("--ddp", "--fsdp") when the group's backend is
// not flags.backend.
DataParallelRun start_data_parallel(const ProcessGroupFlags& flags, const std::string& mode_flag);
// Leaves the default group if start_data_parallel joined it.
void finish_data_parallel(DataParallelRun& run);

// Rank 0 writes the outputs (--save, --log, --plot); it tries them as
// check_outputs (run_setup.h) does, and every rank throws when rank 0
// cannot write them (rank 0 with the problem, the others saying so), so
// that none waits in a collective for a rank that quit. Collective.
void check_outputs_on_main(const std::vector<std::pair<std::string, std::string>>& flags_and_paths,
                           const DataParallelRun& run);

}  // namespace kiln::apps
