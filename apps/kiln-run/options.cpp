// kiln-run's flags, through CLI11 (as kiln-lenet's). CLI11 stops at the
// program (prefix_command), so the program's own flags, even ones spelled
// like kiln-run's, reach it untouched.
#include "apps/kiln-run/options.h"

#include <CLI/CLI.hpp>
#include <cmath>

#include "tensor/error.h"

namespace kiln::apps::run {
namespace {

constexpr const char* kFooter = R"(
Every process gets torchrun's environment: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node rank), GROUP_WORLD_SIZE, and
KILN_STORE_SERVED_BY_LAUNCHER=1: the launcher of node 0 serves the TCP store on MASTER_PORT,
so rank 0 connects to it instead of serving it. With more than one process per node,
OMP_NUM_THREADS=1 unless it is set (with --bind-cores, the number of cores each process is
bound to). RANK = node rank * nproc-per-node + local rank.
--timeout and --heartbeat-timeout set KILN_DISTRIBUTED_TIMEOUT and KILN_HEARTBEAT_TIMEOUT.
Across nodes each rank listens on the address through which it reaches the store, so
--master-addr must be an address of node 0 that the other nodes reach; KILN_GLOO_SOCKET_IFNAME
(or GLOO_SOCKET_IFNAME) names an interface to use instead.

Started by mpirun (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE) or srun (SLURM_PROCID,
SLURM_STEP_NUM_TASKS) and given neither --nnodes nor --node-rank, each task is a node:
its rank is the node rank and the task count is --nnodes. Without --nproc-per-node it then
runs one process in its own place (RANK = the task's rank, LOCAL_RANK = its rank on the
machine). --master-addr and --master-port default to $MASTER_ADDR and $MASTER_PORT.

Each line a process prints is prefixed "[rank R] " (stdout to stdout, stderr to stderr).
When a process exits non-zero or is killed, the others get SIGTERM (SIGKILL after
--term-timeout seconds) and kiln-run exits with that process's exit code (128 + the signal
number if it was killed), naming it and printing its last lines. SIGINT, SIGTERM, SIGHUP and
SIGQUIT sent to kiln-run are passed on to the processes (a second one kills them); kiln-run then
exits with 128 + that signal's number. A program that cannot be started: 127 (not found) or 126.)";

// CLI11 2.1 derives the usage line from the options alone; the program and
// its arguments are no options of kiln-run's.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] PROGRAM [ARGS...]\n";
  }
};

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
  RunOptions o;
  bool standalone = false;
  CLI::App app{
      "Starts a distributed job: N processes of PROGRAM on this node, each told its rank (torchrun's "
      "conventions).",
      "kiln-run"};
  app.formatter(std::make_shared<Formatter>());
  app.get_formatter()->column_width(36);
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node, "processes to start on this node (default 1)");
  app.add_option("--nnodes", o.nnodes, "nodes in the job, one kiln-run on each (default 1)");
  app.add_option("--node-rank,--node_rank", o.node_rank, "this node's place among them, 0 to nnodes-1 (default 0)");
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "address of node 0, where the store runs (default $MASTER_ADDR, else 127.0.0.1 on one node; "
                 "required with --nnodes > 1)");
  app.add_option("--master-port,--master_port", o.master_port,
                 "port of the store on node 0 (default $MASTER_PORT, else 29500 on one node; required with "
                 "--nnodes > 1); 0 on node 0 picks a free port and prints it");
  app.add_flag("--standalone", standalone, "one node with the store on a free port (--nnodes 1 --master-port 0)");
  app.add_option("--term-timeout", o.term_timeout,
                 "seconds the processes get between SIGTERM and SIGKILL when the job is stopped")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout,
                 "seconds each process's rendezvous and every collective may take before the job fails "
                 "(KILN_DISTRIBUTED_TIMEOUT; default 300)");
  app.add_option("--heartbeat-timeout,--heartbeat_timeout", o.heartbeat_timeout,
                 "seconds a silent rank is waited for before the ranks waiting on it name it "
                 "(KILN_HEARTBEAT_TIMEOUT; default 10)");
  app.add_flag("--bind-cores,--bind_cores", o.bind_cores,
               "bind each process to its own share of the cores kiln-run may run on, in order (the first "
               "processes get one more where they do not divide evenly); OMP_NUM_THREADS defaults to the "
               "share's size");
  app.footer(kFooter);
  // The program and its arguments are what CLI11 leaves over.
  app.prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return {std::nullopt, code == 0 ? 0 : kUsageExitCode};
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  KILN_CHECK(!rest.empty(), "no program to run: give it after the flags, e.g. kiln-run --nproc-per-node 2 ./train");
  KILN_CHECK(rest.front().empty() || rest.front()[0] != '-' || rest.front() == "-", "unknown flag '", rest.front(),
             "' (kiln-run --help lists the flags; a program whose name starts with '-' goes after '--')");
  KILN_CHECK(!rest.front().empty(), "the program to run is an empty string");
  o.program = rest.front();
  o.args.assign(rest.begin() + 1, rest.end());

  if (standalone) {
    KILN_CHECK(!o.nnodes || *o.nnodes == 1, "--standalone runs one node, but --nnodes is ", *o.nnodes);
    KILN_CHECK(!o.master_port, "--standalone picks a free port itself; drop --master-port ", *o.master_port);
    o.nnodes = 1;
    o.master_port = 0;
  }
  KILN_CHECK(!o.nproc_per_node || *o.nproc_per_node >= 1, "--nproc-per-node must be at least 1, got ",
             *o.nproc_per_node);
  KILN_CHECK(!o.nnodes || *o.nnodes >= 1, "--nnodes must be at least 1, got ", *o.nnodes);
  KILN_CHECK(!o.node_rank || *o.node_rank >= 0, "--node-rank must be at least 0, got ", *o.node_rank);
  KILN_CHECK(!o.master_port || (*o.master_port >= 0 && *o.master_port <= 65535),
             "--master-port must be a port number from 0 to 65535, got ", *o.master_port);
  KILN_CHECK(!o.master_addr || !o.master_addr->empty(), "--master-addr is empty");
  KILN_CHECK(std::isfinite(o.term_timeout) && o.term_timeout >= 0,
             "--term-timeout must be a number of seconds >= 0, got ", o.term_timeout);
  // A week at most, as init_process_group accepts (seconds_from_env in init.cpp).
  for (const auto& [flag, value] : {std::pair{"--timeout", o.timeout}, {"--heartbeat-timeout", o.heartbeat_timeout}}) {
    KILN_CHECK(!value || (std::isfinite(*value) && *value > 0 && *value <= 7 * 24 * 3600.0), flag,
               " must be a number of seconds, more than 0 and at most a week, got ", *value);
  }
  return {o, 0};
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

}  // namespace kiln::apps::run
