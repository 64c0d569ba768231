#include "distributed/process_identity.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace kiln::distributed {
namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string read_link(const char* path) {
  char target[256];
  const ssize_t n = ::readlink(path, target, sizeof(target));
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

std::string host_identity() {
  const std::string host = host_name();
  const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  const std::string ipc = read_link("/proc/self/ns/ipc");
  const std::string pid = read_link("/proc/self/ns/pid");
  if (host.empty() || boot.empty() || ipc.empty() || pid.empty()) return "";
  return host + " " + boot + " " + ipc + " " + pid;
}

std::string pid_namespace_token() {
  const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  const std::string pid = read_link("/proc/self/ns/pid");
  if (boot.empty() || pid.empty()) return "";
  return boot + "/" + pid;
}

bool process_alive(int64_t pid) {
  if (pid <= 0) return true;  // unknown: assume alive
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  const std::string stat = read_first_line("/proc/" + std::to_string(pid) + "/stat");
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos || name_end + 2 >= stat.size()) return true;
  const char state = stat[name_end + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace kiln::distributed
