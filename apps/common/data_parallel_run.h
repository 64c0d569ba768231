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
