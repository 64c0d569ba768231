// Resolving the launch plan (plan.h; the rules are Note [Launcher
// environment] in launcher.h).
#include "apps/kiln-run/plan.h"

#include <sched.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "tensor/error.h"

extern char** environ;

namespace kiln::apps::run {
namespace {

// The shortest decimal that reads back as `value` ("2.5", "300"), what
// init_process_group parses from KILN_DISTRIBUTED_TIMEOUT.
std::string decimal_text(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), value).ptr;
  return std::string(text, end);
}

const std::string* find(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// The integer value of `name`, if it is set; throws for text that is not a
// whole number, or one below `min`.
std::optional<int> integer_variable(const Environment& env, const std::string& name, int min) {
  const std::string* text = find(env, name);
  if (!text) return std::nullopt;
  int value = 0;
  const char* first = text->data();
  const char* last = first + text->size();
  const auto parsed = std::from_chars(first, last, value);
  KILN_CHECK(parsed.ec == std::errc() && parsed.ptr == last && !text->empty(), "environment variable ", name, "='",
             *text, "' is not a whole number");
  KILN_CHECK(value >= min, "environment variable ", name, "=", value, " must be at least ", min);
  return value;
}

// A task from a rank and a size variable, and optionally the local ones.
std::optional<SchedulerTask> task_from(const Environment& env, const std::string& launcher, const std::string& rank,
                                       const std::string& size, const std::string& local_rank,
                                       const std::string& local_size) {
  if (!find(env, rank) || !find(env, size)) return std::nullopt;
  SchedulerTask task;
  task.launcher = launcher;
  task.rank = *integer_variable(env, rank, 0);
  task.size = *integer_variable(env, size, 1);
  KILN_CHECK(task.rank < task.size, "environment variable ", rank, "=", task.rank, " is not below ", size, "=",
             task.size);
  task.local_rank = integer_variable(env, local_rank, 0);
  if (!local_size.empty()) task.local_size = integer_variable(env, local_size, 1);
  return task;
}

std::string bind_address_for(const std::string& master_addr, int nnodes) {
  if (nnodes == 1) return master_addr;
  return master_addr.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

}  // namespace

Environment current_environment() {
  Environment env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t eq = text.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

std::vector<int> parse_slurm_tasks_per_node(const std::string& value, const std::string& variable) {
  std::vector<int> counts;
  size_t pos = 0;
  const auto malformed = [&] {
    KILN_FAIL("environment variable ", variable, "='", value, "' is not a Slurm task count list like 2(x3),1");
  };
  const auto number = [&]() {
    int n = 0;
    const auto parsed = std::from_chars(value.data() + pos, value.data() + value.size(), n);
    if (parsed.ec != std::errc() || n < 0) malformed();
    pos = static_cast<size_t>(parsed.ptr - value.data());
    return n;
  };
  while (pos < value.size()) {
    const int count = number();
    int repeat = 1;
    if (value.compare(pos, 2, "(x") == 0) {
      pos += 2;
      repeat = number();
      if (pos >= value.size() || value[pos] != ')') malformed();
      ++pos;
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);
    if (pos == value.size()) break;
    if (value[pos] != ',' || pos + 1 == value.size()) malformed();
    ++pos;
  }
  if (counts.empty()) malformed();
  return counts;
}

std::optional<SchedulerTask> detect_scheduler_task(const Environment& env) {
  if (auto task = task_from(env, "mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                            "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")) {
    return task;
  }
  if (auto task = task_from(env, "mpirun (PMI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")) {
    return task;
  }
  auto task = task_from(env, "srun (Slurm)", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "");
  if (!task) return std::nullopt;
  // Slurm has no variable for this machine's task count, only the list of
  // all machines' counts and this machine's index in it.
  const std::string* per_node = find(env, "SLURM_STEP_TASKS_PER_NODE");
  const std::optional<int> node = integer_variable(env, "SLURM_NODEID", 0);
  if (per_node && node) {
    const std::vector<int> counts = parse_slurm_tasks_per_node(*per_node, "SLURM_STEP_TASKS_PER_NODE");
    KILN_CHECK(static_cast<size_t>(*node) < counts.size(), "environment variable SLURM_NODEID=", *node,
               " has no entry in SLURM_STEP_TASKS_PER_NODE='", *per_node, "' (", counts.size(), " nodes)");
    task->local_size = counts[static_cast<size_t>(*node)];
  }
  return task;
}

std::vector<int> allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  KILN_CHECK(::sched_getaffinity(0, sizeof(set), &set) == 0, "cannot read the cores kiln-run may run on: ",
             std::strerror(errno));
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

std::vector<std::vector<int>> share_cores(const std::vector<int>& cores, int processes) {
  KILN_CHECK(processes >= 1, "share_cores: ", processes, " processes");
  KILN_CHECK(static_cast<int>(cores.size()) >= processes, "--bind-cores gives each process at least one core, but ",
             processes, " processes would share the ", cores.size(), " core", cores.size() == 1 ? "" : "s",
             " kiln-run may run on");
  const size_t each = cores.size() / static_cast<size_t>(processes);
  const size_t larger = cores.size() % static_cast<size_t>(processes);
  std::vector<std::vector<int>> shares;
  size_t next = 0;
  for (size_t p = 0; p < static_cast<size_t>(processes); ++p) {
    const size_t n = each + (p < larger ? 1 : 0);
    shares.emplace_back(cores.begin() + static_cast<std::ptrdiff_t>(next),
                        cores.begin() + static_cast<std::ptrdiff_t>(next + n));
    next += n;
  }
  return shares;
}

LaunchPlan resolve_plan(const RunOptions& options, const Environment& env, const std::vector<int>& allowed_cores) {
  LaunchPlan plan;
  plan.program = options.program;
  plan.args = options.args;
  plan.term_timeout = options.term_timeout;
  plan.timeout = options.timeout;
  plan.heartbeat_timeout = options.heartbeat_timeout;

  // Flags that place the node win; only without them does a scheduler task
  // say where this kiln-run stands.
  const std::optional<SchedulerTask> task =
      options.nnodes || options.node_rank ? std::nullopt : detect_scheduler_task(env);
  if (task) {
    plan.nnodes = task->size;
    plan.node_rank = task->rank;
    if (options.nproc_per_node) {
      plan.nproc_per_node = *options.nproc_per_node;
      plan.local_world_size = plan.nproc_per_node;
      plan.origin = "started by " + task->launcher + " as task " + std::to_string(task->rank) + " of " +
                    std::to_string(task->size) + ": node rank " + std::to_string(task->rank) + " of " +
                    std::to_string(task->size) + " nodes";
    } else {
      // One process in the task's own place: its rank is the task's, and
      // its LOCAL_RANK the task's place on the machine (which GPU it takes).
      plan.nproc_per_node = 1;
      plan.local_rank_base = task->local_rank.value_or(0);
      plan.local_world_size = task->local_size.value_or(1);
      KILN_CHECK(plan.local_rank_base < plan.local_world_size, task->launcher, " says this task is local rank ",
                 plan.local_rank_base, " of ", plan.local_world_size, " on its machine");
      plan.origin = "started by " + task->launcher + " as task " + std::to_string(task->rank) + " of " +
                    std::to_string(task->size) + ": one process in its place (RANK " + std::to_string(task->rank) +
                    ", LOCAL_RANK " + std::to_string(plan.local_rank_base) + ")";
    }
  } else {
    plan.nproc_per_node = options.nproc_per_node.value_or(1);
    plan.nnodes = options.nnodes.value_or(1);
    plan.node_rank = options.node_rank.value_or(0);
    plan.local_world_size = plan.nproc_per_node;
    KILN_CHECK(plan.node_rank < plan.nnodes, "--node-rank ", plan.node_rank, " is not below --nnodes ", plan.nnodes,
               " (node ranks go from 0 to ", plan.nnodes - 1, ")");
  }

  const std::string nodes = "--nnodes " + std::to_string(plan.nnodes);
  if (options.master_addr) {
    plan.master_addr = *options.master_addr;
  } else if (const std::string* addr = find(env, "MASTER_ADDR"); addr && !addr->empty()) {
    plan.master_addr = *addr;
  } else {
    KILN_CHECK(plan.nnodes == 1, nodes,
               " needs the address of node 0, where the store runs: give --master-addr "
               "(or set MASTER_ADDR) on every node");
  }
  if (options.master_port) {
    plan.master_port = static_cast<uint16_t>(*options.master_port);
  } else if (find(env, "MASTER_PORT")) {
    const int port = *integer_variable(env, "MASTER_PORT", 0);
    KILN_CHECK(port <= 65535, "environment variable MASTER_PORT=", port, " is not a port number (0 to 65535)");
    plan.master_port = static_cast<uint16_t>(port);
  } else {
    KILN_CHECK(plan.nnodes == 1, nodes,
               " needs the port of the store on node 0: give --master-port (or set "
               "MASTER_PORT) on every node");
  }
  KILN_CHECK(plan.node_rank == 0 || plan.master_port != 0, "node rank ", plan.node_rank,
             " cannot use master port 0: only node 0 may pick a free port; give this node the port node 0 printed");

  plan.serves_store = plan.node_rank == 0;
  plan.store_bind_addr = bind_address_for(plan.master_addr, plan.nnodes);
  // The processes kiln-run starts share its cores; a scheduler's task that
  // runs one process keeps whatever binding the scheduler gave it.
  if (options.bind_cores) plan.cores = share_cores(allowed_cores, plan.nproc_per_node);
  return plan;
}

bool sets_omp_num_threads(const LaunchPlan& plan, const Environment& base) {
  return (plan.local_world_size > 1 || !plan.cores.empty()) && !base.contains("OMP_NUM_THREADS");
}

std::vector<std::string> child_environment(const LaunchPlan& plan, int local_rank, const Environment& base,
                                           uint16_t store_port) {
  Environment env = base;
  env["MASTER_ADDR"] = plan.master_addr;
  env["MASTER_PORT"] = std::to_string(store_port);
  env["RANK"] = std::to_string(plan.rank_of(local_rank));
  env["WORLD_SIZE"] = std::to_string(plan.world_size());
  env["LOCAL_RANK"] = std::to_string(plan.local_rank_base + local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(plan.local_world_size);
  env["GROUP_RANK"] = std::to_string(plan.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(plan.nnodes);
  // A std::string, not "1": GCC 12 warns falsely (-Wrestrict) on assigning
  // a literal to a map's new string.
  const std::string one(1, '1');
  env["KILN_STORE_SERVED_BY_LAUNCHER"] = one;
  if (plan.timeout) env["KILN_DISTRIBUTED_TIMEOUT"] = decimal_text(*plan.timeout);
  if (plan.heartbeat_timeout) env["KILN_HEARTBEAT_TIMEOUT"] = decimal_text(*plan.heartbeat_timeout);
  if (sets_omp_num_threads(plan, base)) {
    env["OMP_NUM_THREADS"] =
        plan.cores.empty() ? one : std::to_string(plan.cores[static_cast<size_t>(local_rank)].size());
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) {
    std::string entry;
    entry.reserve(name.size() + 1 + value.size());
    out.push_back(entry.append(name).append(1, '=').append(value));
  }
  return out;
}

}  // namespace kiln::apps::run
