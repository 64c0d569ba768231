// Running the kiln-run program from a test: a started process whose output
// is collected, every wait bounded, nothing left running when the test ends.
//
//   RunResult r = run_kiln_run({"--nproc-per-node", "2", "--master-port", "0", "sh", "-c", "echo $RANK"});
//   EXPECT_EQ(r.exit_code, 0);
//   auto nodes = run_two_nodes(2, {"./train"});   // --nnodes 2 on one machine, ranks 0..3
//
// Tests always pass --master-port 0 (or run_two_nodes' port): ctest runs
// tests in parallel, and the default 29500 would clash.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace kiln::apps::run::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Variables to set (a value) or remove (nullopt) in the started process's
// environment, on top of the test's own.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

// One started program. The destructor stops it if it still runs: SIGTERM,
// which kiln-run passes on to its processes, then SIGKILL after 2 s (its
// processes then get SIGTERM from the kernel: kiln-run sets
// PR_SET_PDEATHSIG).
class Process {
 public:
  Process(const std::vector<std::string>& argv, const EnvChanges& changes = {}) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string text(*e);
      const size_t eq = text.find('=');
      if (eq != std::string::npos) env[text.substr(0, eq)] = text.substr(eq + 1);
    }
    for (const auto& [name, value] : changes) {
      if (value) {
        env[name] = *value;
      } else {
        env.erase(name);
      }
    }
    std::vector<std::string> env_strings;
    for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
    std::vector<char*> argv_ptrs, env_ptrs;
    for (const std::string& a : argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
    argv_ptrs.push_back(nullptr);
    for (const std::string& e : env_strings) env_ptrs.push_back(const_cast<char*>(e.c_str()));
    env_ptrs.push_back(nullptr);

    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only exec-safe calls: the test process has threads.
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    if (pid_ < 0) throw std::runtime_error("fork failed");
    fds_ = {out[0], err[0]};
    for (int fd : fds_) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  }

  ~Process() {
    if (running()) {
      ::kill(pid_, SIGTERM);
      if (!wait(2s)) {
        ::kill(pid_, SIGKILL);
        wait(2s);
      }
    }
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return status_ < 0; }
  void signal(int signo) const { ::kill(pid_, signo); }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  // The exit code a shell shows: the code, or 128 + the signal; -1 while it runs.
  int exit_code() const {
    if (running()) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  // From start to exit (or to now).
  double seconds() const { return std::chrono::duration<double>((running() ? Clock::now() : end_) - start_).count(); }

  // Collects output until `done()` holds or `timeout` passes; returns done().
  bool read_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!done()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pump(static_cast<int>(std::min<int64_t>(left, 50)));
      if (!running() && fds_[0] < 0 && fds_[1] < 0) return done();
    }
    return true;
  }

  // Waits up to `timeout` for the process to exit and its pipes to close.
  bool wait(std::chrono::milliseconds timeout) {
    return read_until([this] { return !running() && fds_[0] < 0 && fds_[1] < 0; }, timeout);
  }

 private:
  // One round: output that is ready, then whether the process exited.
  void pump(int timeout_ms) {
    std::vector<pollfd> fds;
    for (int fd : fds_) {
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    }
    if (!fds.empty()) {
      ::poll(fds.data(), fds.size(), timeout_ms);
    } else {
      ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    }
    for (int i = 0; i < 2; ++i) {
      char buffer[65536];
      while (fds_[i] >= 0) {
        const ssize_t got = ::read(fds_[i], buffer, sizeof(buffer));
        if (got > 0) {
          (i == 0 ? out_ : err_).append(buffer, static_cast<size_t>(got));
        } else if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
          break;
        } else {
          ::close(fds_[i]);
          fds_[i] = -1;
        }
      }
    }
    int status = 0;
    if (running() && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      status_ = status;
      end_ = Clock::now();
    }
  }

  pid_t pid_ = -1;
  std::array<int, 2> fds_ = {-1, -1};
  std::string out_, err_;
  int status_ = -1;  // from waitpid(); -1 while running
  Clock::time_point start_, end_;
};

struct RunResult {
  int exit_code = -1;  // -1: still running at the timeout (then killed)
  std::string out, err;
  double seconds = 0;
};

inline std::vector<std::string> kiln_run_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {KILN_RUN_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

inline RunResult result_of(Process& p) {
  return {p.exit_code(), p.out(), p.err(), p.seconds()};
}

// Runs kiln-run with `args` to the end, stopping it after `timeout`.
inline RunResult run_kiln_run(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 5s,
                              const EnvChanges& changes = {}) {
  Process p(kiln_run_argv(args), changes);
  p.wait(timeout);
  return result_of(p);
}

// The port a kiln-run printed for --master-port 0 ("kiln-run: store
// listening on ADDR:PORT"), or 0 if it printed none.
inline int printed_store_port(const std::string& err) {
  static const std::regex line("kiln-run: store listening on [^\n]*:([0-9]+)\n");
  std::smatch m;
  return std::regex_search(err, m, line) ? std::stoi(m[1]) : 0;
}

// Two "nodes" on this machine: kiln-run --nnodes 2 --node-rank 0 with
// --master-port 0, then, once node 0 has printed its port, --node-rank 1 on
// that port (no race for a free port); each runs `nproc` processes of
// `program`. `extra_args` go to both launchers before the program. Returns
// both launchers' results; a launcher still running at `timeout` is stopped.
inline std::array<RunResult, 2> run_two_nodes(int nproc, const std::vector<std::string>& program,
                                              std::chrono::milliseconds timeout = 8s,
                                              const std::vector<std::string>& extra_args = {}) {
  const auto deadline = Clock::now() + timeout;
  const auto left = [&] {
    return std::max(0ms, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  const auto args_for = [&](int node, int port) {
    std::vector<std::string> args = {"--nnodes",      "2", "--node-rank",   std::to_string(node), "--nproc-per-node",
                                     std::to_string(nproc), "--master-addr", "127.0.0.1", "--master-port",
                                     std::to_string(port)};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    args.insert(args.end(), program.begin(), program.end());
    return args;
  };
  Process node0(kiln_run_argv(args_for(0, 0)));
  node0.read_until([&] { return printed_store_port(node0.err()) != 0; }, left());
  const int port = printed_store_port(node0.err());
  if (port == 0) {
    node0.wait(left());
    return {result_of(node0), RunResult{}};
  }
  Process node1(kiln_run_argv(args_for(1, port)));
  node1.wait(left());
  node0.wait(left());
  return {result_of(node0), result_of(node1)};
}

}  // namespace kiln::apps::run::testing
