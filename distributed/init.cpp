#include "distributed/init.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <mutex>

#include "distributed/file_store.h"
#include "distributed/tcp_store.h"
#include "tensor/error.h"

#include "distributed/backend_registry.h"

namespace kiln::distributed {

namespace {

// The default group, as torch.distributed keeps it: one per process,
// created by init_process_group and dropped by destroy_process_group.
std::mutex default_mutex;
std::shared_ptr<ProcessGroup> default_pg;

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

// The integer `text` if it is one, within [low, high]; else nullopt.
std::optional<long> parse_integer(const std::string& text, long low, long high) {
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || value < low || value > high) return std::nullopt;
  return value;
}

// The integer in environment variable `name`; `what` says who needs it.
int env_int(const char* name, const std::string& what) {
  const std::string text = env_or_empty(name);
  KILN_CHECK(!text.empty(), what, ": environment variable ", name,
             " is not set (kiln-run and torchrun set it; or pass the value explicitly)");
  const auto value = parse_integer(text, 0, std::numeric_limits<int>::max());
  KILN_CHECK(value.has_value(), what, ": environment variable ", name, "='", text,
             "' is not a non-negative integer");
  return static_cast<int>(*value);
}

uint16_t parse_port(const std::string& text, const std::string& what) {
  const auto value = parse_integer(text, 1, 65535);
  KILN_CHECK(value.has_value(), what, ": port '", text, "' is not a number in 1..65535");
  return static_cast<uint16_t>(*value);
}

void check_place(int world_size, int rank, const std::string& what) {
  KILN_CHECK(world_size >= 1, what, ": world_size must be at least 1, got ", world_size);
  KILN_CHECK(rank >= 0 && rank < world_size, what, ": rank ", rank, " is outside 0..", world_size - 1);
}

// The TCP store at host:port: rank 0 serves it on every interface (as
// PyTorch's TCPStore does), unless `served_elsewhere`; everyone is a client.
std::shared_ptr<Store> tcp_store(const std::string& host, uint16_t port, int rank, bool served_elsewhere,
                                 std::chrono::milliseconds timeout, const std::string& what) {
  if (rank == 0 && !served_elsewhere) {
    try {
      return TCPStore::serve("", port, timeout);
    } catch (const Error& e) {
      KILN_FAIL(what, ": rank 0 cannot serve the store on port ", port,
                " (is another job using it? pick another port): ", e.message());
    }
  }
  return std::make_shared<TCPStore>(host, port, timeout);
}

// Splits "HOST:PORT" (HOST may be "[v6]") at the last colon.
std::pair<std::string, uint16_t> split_host_port(const std::string& address, const std::string& what) {
  const size_t colon = address.rfind(':');
  KILN_CHECK(colon != std::string::npos && colon > 0, what, ": '", address, "' is not HOST:PORT");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, parse_port(address.substr(colon + 1), what)};
}

std::shared_ptr<ProcessGroup> checked_default(const char* op) {
  std::lock_guard<std::mutex> lock(default_mutex);
  KILN_CHECK(default_pg, op, ": the default process group is not initialized; call init_process_group first");
  return default_pg;
}

ProcessGroup& group_or_default(ProcessGroup* group, const char* op) {
  if (group) return *group;
  // The default group lives until destroy_process_group, which a program
  // must not call while it still runs collectives on it.
  return *checked_default(op);
}

}  // namespace

std::shared_ptr<Store> make_store(const std::string& init_method, int& world_size, int& rank,
                                  std::chrono::milliseconds timeout) {
  const std::string what = "init_process_group(init_method='" + init_method + "')";
  if (init_method == "env://") {
    if (world_size < 0) world_size = env_int("WORLD_SIZE", what);
    if (rank < 0) rank = env_int("RANK", what);
    check_place(world_size, rank, what);
    const std::string host = env_or_empty("MASTER_ADDR");
    const std::string port = env_or_empty("MASTER_PORT");
    KILN_CHECK(!host.empty(), what, ": environment variable MASTER_ADDR is not set");
    KILN_CHECK(!port.empty(), what, ": environment variable MASTER_PORT is not set");
    const bool served_by_launcher = env_or_empty("KILN_STORE_SERVED_BY_LAUNCHER") == "1";
    return tcp_store(host, parse_port(port, what), rank, served_by_launcher, timeout, what);
  }
  if (init_method.rfind("tcp://", 0) == 0) {
    KILN_CHECK(world_size >= 0 && rank >= 0, what, ": tcp:// needs world_size and rank to be given");
    check_place(world_size, rank, what);
    auto [host, port] = split_host_port(init_method.substr(6), what);
    return tcp_store(host, port, rank, /*served_elsewhere=*/false, timeout, what);
  }
  if (init_method.rfind("file://", 0) == 0) {
    KILN_CHECK(world_size >= 0 && rank >= 0, what, ": file:// needs world_size and rank to be given");
    check_place(world_size, rank, what);
    const std::string path = init_method.substr(7);
    KILN_CHECK(!path.empty() && path.front() == '/', what, ": file:// needs an absolute path, as in file:///tmp/job");
    return std::make_shared<FileStore>(path, world_size, timeout);
  }
  KILN_FAIL(what, ": unknown init method; use env://, tcp://HOST:PORT or file:///PATH");
}

std::vector<std::string> available_backends() { return registered_or_installed_backends(); }

std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, std::shared_ptr<Store> store,
                                                 int world_size, int rank, ProcessGroupOptions options) {
  return process_group_backend(backend, "init_process_group").create(std::move(store), rank, world_size, options);
}

namespace {

// Seconds from `variable` as milliseconds, or `fallback` when it is unset.
std::chrono::milliseconds seconds_from_env(const char* variable, std::chrono::milliseconds fallback) {
  const std::string text = env_or_empty(variable);
  if (text.empty()) return fallback;
  double seconds = 0;
  size_t used = 0;
  try {
    seconds = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KILN_CHECK(used == text.size() && std::isfinite(seconds) && seconds > 0 && seconds <= 7 * 24 * 3600.0,
             variable, "='", text, "' must be a number of seconds, more than 0 and at most a week");
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

}  // namespace

std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds given) {
  return given.count() > 0 ? given : seconds_from_env("KILN_DISTRIBUTED_TIMEOUT", kDefaultTimeout);
}

std::chrono::milliseconds heartbeat_timeout_from_env(std::chrono::milliseconds given) {
  return given.count() > 0 ? given : seconds_from_env("KILN_HEARTBEAT_TIMEOUT", kDefaultHeartbeatTimeout);
}

void init_process_group(const std::string& backend, const std::string& init_method, int world_size, int rank,
                        std::chrono::milliseconds timeout, std::chrono::milliseconds heartbeat_timeout) {
  timeout = timeout_from_env(timeout);
  heartbeat_timeout = heartbeat_timeout_from_env(heartbeat_timeout);
  {
    std::lock_guard<std::mutex> lock(default_mutex);
    KILN_CHECK(!default_pg, "init_process_group: the default process group is already initialized (rank ",
               default_pg->rank(), " of ", default_pg->size(), "); call destroy_process_group first");
  }
  // Loads the backend's library if it has one, or says why it cannot.
  const ProcessGroupBackend& chosen = process_group_backend(backend, "init_process_group");
  ProcessGroupOptions options;
  options.timeout = timeout;
  options.heartbeat_timeout = heartbeat_timeout;
  options.debug = debug_mode_from_env();

  std::shared_ptr<Store> store;
  // MPI knows rank and size itself; it needs a store only when one is named
  // (mpirun does not set MASTER_ADDR, so the default env:// means "none":
  // ProcessGroupMPI then makes its own for progress reports).
  const bool mpi_without_store =
      backend == "mpi" && init_method == "env://" && env_or_empty("MASTER_ADDR").empty();
  if (chosen.launcher_world_size && !mpi_without_store) {
    const int launched = chosen.launcher_world_size();
    KILN_CHECK(world_size < 0 || world_size == launched, "init_process_group('", backend, "'): world_size ",
               world_size, " was given but ", backend, " started ", launched, " processes");
    world_size = launched;
  }
  if (!mpi_without_store) store = make_store(init_method, world_size, rank, timeout);
  auto group = chosen.create(std::move(store), rank, world_size, options);
  std::lock_guard<std::mutex> lock(default_mutex);
  default_pg = std::move(group);
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(default_mutex);
  return default_pg != nullptr;
}

ProcessGroup& default_group() { return *checked_default("default_group"); }

std::shared_ptr<ProcessGroup> default_group_ptr() { return checked_default("default_group"); }

int get_rank() { return checked_default("get_rank")->rank(); }

int get_world_size() { return checked_default("get_world_size")->size(); }

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(default_mutex);
    KILN_CHECK(default_pg, "destroy_process_group: the default process group is not initialized");
    group.swap(default_pg);
  }
  // The group (and, on rank 0, the store it serves) goes when the last
  // holder lets go: here, unless a strategy still holds a reference.
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
  auto world = checked_default("new_group");
  ProcessGroupOptions options;
  options.name.clear();  // new_subgroup names it "group<N>"
  options.timeout = timeout.count() > 0 ? timeout : world->timeout();
  options.heartbeat_timeout = world->heartbeat_timeout();
  options.debug = world->debug();
  options.agreement_check = world->agreement_check();
  return world->new_subgroup(ranks, options);
}

void barrier(ProcessGroup* group) { group_or_default(group, "barrier").barrier()->wait(); }

void all_reduce(const Tensor& tensor, ReduceOp op, ProcessGroup* group) {
  group_or_default(group, "all_reduce").all_reduce(tensor, op)->wait();
}

void broadcast(const Tensor& tensor, int root, ProcessGroup* group) {
  group_or_default(group, "broadcast").broadcast(tensor, root)->wait();
}

void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, ProcessGroup* group) {
  group_or_default(group, "all_gather").all_gather(outputs, input)->wait();
}

}  // namespace kiln::distributed
