#include "multi_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "distributed/file_store.h"
#include "distributed/init.h"
#include "tensor/error.h"

extern char** environ;

namespace kiln::distributed::testing {

namespace {

using Clock = std::chrono::steady_clock;

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

int env_int(const char* name, const char* what) {
  const char* value = env(name);
  KILN_CHECK(value != nullptr, what, ": ", name, " is not set; this is not a rank process started by run_on_ranks");
  return std::atoi(value);
}

// ---- which run_on_ranks() call of the current test this is ------------------------

// Counts run_on_ranks() calls within one test; reset as each test starts, so
// that the parent and its rank processes number the calls alike.
int calls_in_this_test = 0;

class CallCounterReset : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { calls_in_this_test = 0; }
};

// Registered before main(): gtest_main only adds listeners, never clears them.
const bool call_counter_registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new CallCounterReset);
  return true;
}();

std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  KILN_CHECK(info != nullptr, "run_on_ranks: must be called from a running TEST body");
  // "Suite.Name", or "Prefix/Suite.Name/Param" for parametrized tests: the
  // form --gtest_filter matches.
  return std::string(info->test_suite_name()) + "." + info->name();
}

std::string marker_path(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".ran"; }

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os << static_cast<double>(ms.count()) / 1000.0;
  return os.str();
}

// ---- starting processes ----------------------------------------------------------------

// The environment for a rank process: the parent's, without what would make
// gtest in the child run another test, shard it away or overwrite the
// parent's report, plus `extra`.
std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  static const char* const dropped[] = {
      "GTEST_FILTER=", "GTEST_TOTAL_SHARDS=", "GTEST_SHARD_INDEX=",       "GTEST_OUTPUT=",
      "GTEST_REPEAT=", "GTEST_SHUFFLE=",      "GTEST_SHARD_STATUS_FILE=", "KILN_TEST_"};
  std::vector<std::string> result;
  for (char** e = environ; *e; ++e) {
    bool keep = true;
    for (const char* prefix : dropped) keep = keep && std::strncmp(*e, prefix, std::strlen(prefix)) != 0;
    if (keep) result.emplace_back(*e);
  }
  result.insert(result.end(), extra.begin(), extra.end());
  return result;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

struct Child {
  std::string label;  // "rank 1", or "mpirun" for all ranks at once
  pid_t pid = -1;
  int output_fd = -1;  // read end of the child's stdout and stderr
  std::string output;
  bool exited = false;
  bool killed_at_deadline = false;
  int status = 0;
};

// Starts `argv` with `environment` in its own process group, stdout and
// stderr into a pipe, every signal at its default action.
Child spawn(const std::string& label, std::vector<std::string> argv, std::vector<std::string> environment) {
  int fds[2];
  KILN_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "run_on_ranks: pipe2 failed: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args = pointers(argv);
  std::vector<char*> envp = pointers(environment);
  Child child;
  child.label = label;
  const int error = ::posix_spawnp(&child.pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(fds[1]);
  if (error != 0) {
    ::close(fds[0]);
    KILN_FAIL("run_on_ranks: cannot start ", argv[0], " for ", label, ": ", std::strerror(error));
  }
  child.output_fd = fds[0];
  ::fcntl(child.output_fd, F_SETFL, O_NONBLOCK);
  return child;
}

// Reads what `child` has written so far; closes the pipe at end of file.
void drain(Child& child) {
  char buffer[4096];
  while (child.output_fd >= 0) {
    const ssize_t n = ::read(child.output_fd, buffer, sizeof buffer);
    if (n > 0) {
      child.output.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return;
    } else {
      ::close(child.output_fd);
      child.output_fd = -1;
    }
  }
}

bool failed(const Child& child, const RankOptions& options, int rank) {
  const auto expected = options.expect_killed_by_signal.find(rank);
  if (expected != options.expect_killed_by_signal.end()) {
    return !(WIFSIGNALED(child.status) && WTERMSIG(child.status) == expected->second);
  }
  return !(WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0);
}

// Waits for every child until the deadline (cut short after a failure),
// collecting output; kills the process groups of those still running.
void supervise(std::vector<Child>& children, const RankOptions& options) {
  auto deadline = Clock::now() + options.deadline;
  bool cut_short = false;
  while (true) {
    std::vector<pollfd> fds;
    for (Child& c : children) {
      if (c.output_fd >= 0) fds.push_back({c.output_fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 20);
    bool running = false;
    for (size_t r = 0; r < children.size(); ++r) {
      Child& c = children[r];
      drain(c);
      if (!c.exited && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.exited = true;
        if (!cut_short && failed(c, options, static_cast<int>(r))) {
          cut_short = true;
          deadline = std::min(deadline, Clock::now() + options.after_failure);
        }
      }
      running = running || !c.exited;
    }
    if (!running || Clock::now() >= deadline) break;
  }
  for (Child& c : children) {
    if (c.exited) continue;
    // SIGTERM first, so that mpirun can take its ranks down with it.
    ::kill(-c.pid, SIGTERM);
  }
  const auto grace = Clock::now() + std::chrono::seconds(2);
  for (Child& c : children) {
    if (c.exited) continue;
    c.killed_at_deadline = true;
    while (::waitpid(c.pid, &c.status, WNOHANG) != c.pid) {
      if (Clock::now() >= grace) {
        ::kill(-c.pid, SIGKILL);
        ::waitpid(c.pid, &c.status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    c.exited = true;
  }
  // Whatever is left in the pipes; a grandchild still holding a pipe open
  // (killed with its group above, or about to be) must not block this.
  for (Child& c : children) {
    drain(c);
    if (c.output_fd >= 0) ::close(c.output_fd);
    c.output_fd = -1;
  }
}

std::string describe_ending(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return detail::str("was killed by signal ", WTERMSIG(status), " (", ::strsignal(WTERMSIG(status)), ")");
  }
  return "ended with wait status " + std::to_string(status);
}

std::string prefixed(const std::string& label, const std::string& output) {
  std::string result;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) result += "[" + label + "] " + line + "\n";
  return result;
}

// ---- the two sides of run_on_ranks --------------------------------------------------------

void run_as_rank(int world_size, const std::function<void(int)>& body, int call) {
  if (call != env_int("KILN_TEST_CALL", "run_on_ranks")) return;  // another call's processes
  // A rank whose parent test process is gone (killed by ctest's timeout)
  // must not run on alone.
  if (const char* parent = env("KILN_TEST_PARENT_PID")) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != std::atoi(parent)) std::_Exit(1);
  }
  const int rank = test_rank();
  ASSERT_EQ(world_size, test_world_size()) << "run_on_ranks: this rank process was started for another world size";
  std::ofstream(marker_path(test_store_dir(), rank)) << "ran\n";
  body(rank);
}

std::vector<Child> start_ranks(int world_size, const std::string& test, const std::string& dir, int call,
                               Launcher launcher) {
  char exe[4096];
  const ssize_t length = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  KILN_CHECK(length > 0, "run_on_ranks: cannot read /proc/self/exe: ", std::strerror(errno));
  exe[length] = '\0';
  const std::vector<std::string> gtest_args = {"--gtest_filter=" + test, "--gtest_also_run_disabled_tests",
                                               "--gtest_color=no"};
  const std::vector<std::string> common = {"KILN_TEST_WORLD_SIZE=" + std::to_string(world_size),
                                           "KILN_TEST_STORE_DIR=" + dir, "KILN_TEST_CALL=" + std::to_string(call)};
  std::vector<Child> children;
  try {
    if (launcher == Launcher::Mpirun) {
      std::vector<std::string> argv = {"mpirun", "--allow-run-as-root",     "--oversubscribe", "--tag-output",
                                       "-np",    std::to_string(world_size)};
      for (const char* name : {"KILN_TEST_WORLD_SIZE", "KILN_TEST_STORE_DIR", "KILN_TEST_CALL", "KILN_TEST_LAUNCHER"}) {
        argv.insert(argv.end(), {"-x", name});
      }
      argv.push_back(exe);
      argv.insert(argv.end(), gtest_args.begin(), gtest_args.end());
      std::vector<std::string> extra = common;
      extra.push_back("KILN_TEST_LAUNCHER=mpirun");
      children.push_back(spawn("mpirun", argv, child_environment(extra)));
    } else {
      for (int rank = 0; rank < world_size; ++rank) {
        std::vector<std::string> argv = {exe};
        argv.insert(argv.end(), gtest_args.begin(), gtest_args.end());
        std::vector<std::string> extra = common;
        extra.push_back("KILN_TEST_RANK=" + std::to_string(rank));
        extra.push_back("KILN_TEST_PARENT_PID=" + std::to_string(::getpid()));
        children.push_back(spawn("rank " + std::to_string(rank), argv, child_environment(extra)));
      }
    }
  } catch (...) {
    for (Child& c : children) {
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, &c.status, 0);
      ::close(c.output_fd);
    }
    throw;
  }
  return children;
}

void run_as_parent(int world_size, const RankOptions& options, int call) {
  const std::string test = current_test_name();
  char pattern[] = "/tmp/kiln_ranks_XXXXXX";
  KILN_CHECK(::mkdtemp(pattern) != nullptr, "run_on_ranks: mkdtemp failed: ", std::strerror(errno));
  const std::string dir = pattern;

  std::vector<Child> children = start_ranks(world_size, test, dir, call, options.launcher);
  supervise(children, options);

  std::string failures;
  for (size_t i = 0; i < children.size(); ++i) {
    const Child& c = children[i];
    const int rank = static_cast<int>(i);
    if (c.killed_at_deadline) {
      failures +=
          detail::str(c.label, " did not finish within ", seconds_text(options.deadline), " s and was killed\n");
    } else if (options.launcher == Launcher::Mpirun) {
      if (failed(c, options, -1)) {
        failures += detail::str("mpirun (", world_size, " ranks) ", describe_ending(c.status), "\n");
      } else {
        for (int r = 0; r < world_size; ++r) {
          if (!std::filesystem::exists(marker_path(dir, r))) {
            failures += detail::str("rank ", r, " (under mpirun) passed without running the body\n");
          }
        }
      }
    } else if (failed(c, options, rank)) {
      const auto expected = options.expect_killed_by_signal.find(rank);
      failures += c.label + " " + describe_ending(c.status);
      if (expected != options.expect_killed_by_signal.end()) {
        failures += detail::str(" but was expected to be killed by signal ", expected->second, " (",
                                ::strsignal(expected->second), ")");
      }
      failures += "\n";
    } else if (!options.expect_killed_by_signal.count(rank) && !std::filesystem::exists(marker_path(dir, rank))) {
      failures += detail::str(c.label, " passed without running the body: --gtest_filter=", test,
                              " found no test in the rank process\n");
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);

  const bool show = env("KILN_TEST_SHOW_RANK_OUTPUT") != nullptr;
  if (failures.empty() && !show) return;
  std::string output;
  for (const Child& c : children) output += prefixed(c.label, c.output);
  if (failures.empty()) {
    std::printf("%s", output.c_str());
  } else {
    ADD_FAILURE() << "run_on_ranks(" << world_size << ") of " << test << " failed:\n"
                  << failures << "Output of the ranks:\n"
                  << output;
  }
}

}  // namespace

bool in_rank_process() { return env("KILN_TEST_RANK") != nullptr || env("KILN_TEST_LAUNCHER") != nullptr; }

int test_rank() {
  if (const char* launcher = env("KILN_TEST_LAUNCHER"); launcher && std::string(launcher) == "mpirun") {
    return env_int("OMPI_COMM_WORLD_RANK", "test_rank (mpirun)");
  }
  return env_int("KILN_TEST_RANK", "test_rank");
}

int test_world_size() { return env_int("KILN_TEST_WORLD_SIZE", "test_world_size"); }

std::string test_store_dir() {
  const char* dir = env("KILN_TEST_STORE_DIR");
  KILN_CHECK(dir != nullptr, "test_store_dir: KILN_TEST_STORE_DIR is not set; this is not a rank process");
  return dir;
}

void run_on_ranks(int world_size, const std::function<void(int rank)>& body, RankOptions options) {
  const int call = ++calls_in_this_test;
  if (in_rank_process()) {
    run_as_rank(world_size, body, call);
  } else {
    run_as_parent(world_size, options, call);
  }
}

std::shared_ptr<ProcessGroup> make_test_group(const std::string& backend, std::chrono::milliseconds timeout) {
  const int world_size = test_world_size();
  const int rank = test_rank();
  // World size -1: the file is never removed by the store; run_on_ranks
  // removes the whole directory once every rank has finished.
  auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, timeout);
  ProcessGroupOptions options;
  options.timeout = timeout;
  return make_process_group(backend, store, world_size, rank, options);
}

}  // namespace kiln::distributed::testing
