// The command line of kiln-run, torchrun's flags with its spellings:
//
//   kiln-run --nproc-per-node 4 train --epochs 3
//   kiln-run --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500 --nproc-per-node 8 train
//
// Every flag also takes torchrun's older underscore spelling (--nproc_per_node).
// The first argument that is not a flag of kiln-run is the program; it and
// everything after it go to the processes unchanged ("--" may stand before
// the program). What a flag left unset becomes is decided later, by
// resolve_plan() (plan.h), which also looks at mpirun's and Slurm's variables.
//
//   CommandLine cl = parse_command_line(argc, argv);  // throws kiln::Error: exit 2
//   if (!cl.options) return cl.exit_code;   // --help (0) or a bad flag (2, printed)
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kiln::apps::run {

// kiln-run's exit code for a command line it cannot use (unknown flag,
// missing program, a value out of range), as argparse and torchrun use.
inline constexpr int kUsageExitCode = 2;

// The flags as given; an empty optional is a flag the user did not give.
struct RunOptions {
  std::optional<int> nproc_per_node;
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  // Seconds between SIGTERM and SIGKILL when the processes are stopped.
  double term_timeout = 5.0;
  // Seconds, passed on to every process as KILN_DISTRIBUTED_TIMEOUT and
  // KILN_HEARTBEAT_TIMEOUT (init_process_group's defaults, init.h); unset
  // leaves the variables as kiln-run found them.
  std::optional<double> timeout;
  std::optional<double> heartbeat_timeout;
  // Bind each local process to its own share of the cores kiln-run may run
  // on (LaunchPlan::cores).
  bool bind_cores = false;
  std::string program;
  std::vector<std::string> args;
};

// The result of parsing: options to run with, or none and the exit code
// (0 after --help; kUsageExitCode after a flag CLI11 rejects, with CLI11's
// message printed to stderr).
struct CommandLine {
  std::optional<RunOptions> options;
  int exit_code = 0;
};

// Parses argv (argv[0] is kiln-run itself). Checks what the flags alone can
// tell: an unknown flag or a value that is not a number (CLI11's message,
// printed), and throws kiln::Error naming the flag for a value out of range
// or a missing program. Checks that need the environment are resolve_plan()'s.
CommandLine parse_command_line(int argc, const char* const* argv);
CommandLine parse_command_line(const std::vector<std::string>& args);

}  // namespace kiln::apps::run
