// fork + execve for kiln-run. kiln-run has threads (the store's server), so
// between fork() and execve() the child may only make async-signal-safe
// calls: everything it needs (paths, argv, env) is built before fork(), and
// the PATH search happens in kiln-run, not in execvp().
#include "apps/kiln-run/child_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tensor/error.h"

namespace kiln::apps::run {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Makes `fd` the child's `target` (0, 1 or 2) with close-on-exec cleared.
// dup2 onto itself would keep the flag, so that case clears it by hand.
bool move_to(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

void close_pair(int fds[2]) {
  for (int i = 0; i < 2; ++i) {
    if (fds[i] >= 0) ::close(fds[i]);
    fds[i] = -1;
  }
}

// Runs in the forked child: async-signal-safe calls only. Never returns.
[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, int devnull, int out, int err,
                             int report, pid_t parent, const cpu_set_t* cores) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int signo = 1; signo < NSIG; ++signo) ::sigaction(signo, &dfl, nullptr);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // kiln-run may have died before prctl(): then nobody would stop us.
  if (::getppid() != parent) ::_exit(127);
  int error = 0;
  if (!move_to(devnull, 0) || !move_to(out, 1) || !move_to(err, 2) ||
      (cores != nullptr && ::sched_setaffinity(0, sizeof(*cores), cores) != 0)) {
    error = errno;
  } else {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(path, argv, envp);
    error = errno;
  }
  while (::write(report, &error, sizeof(error)) < 0 && errno == EINTR) {
  }
  ::_exit(127);
}

}  // namespace

std::optional<std::string> find_program(const std::string& program, const char* path) {
  if (program.find('/') != std::string::npos) return program;
  // execvp's default when PATH is unset.
  const std::string search = path ? path : "/bin:/usr/bin";
  size_t start = 0;
  while (true) {
    const size_t end = search.find(':', start);
    const std::string dir = search.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    if (end == std::string::npos) return std::nullopt;
    start = end + 1;
  }
}

std::string core_list(const std::vector<int>& cores) {
  std::string text;
  for (size_t i = 0; i < cores.size();) {
    size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cores[i]);
    if (j > i) {
      text += '-';
      text += std::to_string(cores[j]);
    }
    i = j + 1;
  }
  return text;
}

SpawnResult spawn(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  const std::vector<int>& cores) {
  // Built before fork(): the child may only make async-signal-safe calls.
  cpu_set_t core_set;
  CPU_ZERO(&core_set);
  for (int c : cores) {
    KILN_CHECK(c >= 0 && c < CPU_SETSIZE, "cannot bind '", path, "' to core ", c, ": not a core number");
    CPU_SET(c, &core_set);
  }
  std::vector<char*> argv_ptrs, env_ptrs;
  for (const std::string& a : argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
  argv_ptrs.push_back(nullptr);
  for (const std::string& e : env) env_ptrs.push_back(const_cast<char*>(e.c_str()));
  env_ptrs.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) {
    const int error = errno;
    if (devnull >= 0) ::close(devnull);
    close_pair(out);
    close_pair(err);
    close_pair(report);
    KILN_FAIL("cannot create the pipes for '", path, "': ", std::strerror(error));
  }

  // Signals stay blocked until the child has reset every handler: a signal
  // caught in between would run kiln-run's handler in the child.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(path.c_str(), argv_ptrs.data(), env_ptrs.data(), devnull, out[1], err[1], report[1], parent,
               cores.empty() ? nullptr : &core_set);
  }
  const int fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  ::close(report[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    ::close(report[0]);
    KILN_FAIL("cannot start '", path, "': fork failed: ", std::strerror(fork_error));
  }
  // The child does this too; whichever runs first wins, so that kiln-run
  // never signals a group that does not exist yet. After execve the call
  // fails with EACCES, which is fine: the child already did it.
  ::setpgid(pid, pid);

  SpawnResult result;
  result.pid = pid;
  int error = 0;
  ssize_t got;
  while ((got = ::read(report[0], &error, sizeof(error))) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof(error))) {
    // execve failed: the child exits at once with 127.
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(out[0]);
    ::close(err[0]);
    result.exec_error = error;
    return result;
  }
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  result.stdout_fd = out[0];
  result.stderr_fd = err[0];
  return result;
}

std::string signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signo = WTERMSIG(status);
    std::string text = "was killed by signal " + std::to_string(signo) + " (" + signal_name(signo) + ")";
    if (WCOREDUMP(status)) text += ", core dumped";
    return text;
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace kiln::apps::run
