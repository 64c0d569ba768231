// Helpers for the store tests: error messages, temporary directories and
// forked child processes that never outlive a test.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tensor/error.h"

namespace kiln::distributed::testing {

// The message of the kiln::Error `f` throws, or "<no error>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.message();
  }
  return "<no error>";
}

inline std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/kiln_store_test_XXXXXX";
    const char* made = ::mkdtemp(name);
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Forked children of one test. Each runs a body that may use only what it
// makes itself (stores, sockets) and leaves with _exit(): 0 if the body
// returned true, 1 if it returned false or threw. Children still running
// when the test ends are killed, and die with the test process too.
class Children {
 public:
  ~Children() {
    for (pid_t pid : running_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  pid_t spawn(const std::function<bool()>& body) {
    std::fflush(nullptr);  // or the child flushes the parent's buffered output again
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int code = 1;
      try {
        code = body() ? 0 : 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
      }
      ::_exit(code);
    }
    if (pid > 0) running_.push_back(pid);
    return pid;
  }

  // Waits up to `timeout` for every child and returns their exit codes in
  // spawn order; a child killed by a signal counts as 128 + signal, and one
  // still running at the timeout is killed and counts as -1.
  std::vector<int> wait_all(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<int> codes;
    for (pid_t pid : running_) {
      int status = 0;
      pid_t done = 0;
      while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      if (done == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        codes.push_back(-1);
      } else if (WIFEXITED(status)) {
        codes.push_back(WEXITSTATUS(status));
      } else {
        codes.push_back(128 + WTERMSIG(status));
      }
    }
    running_.clear();
    return codes;
  }

 private:
  std::vector<pid_t> running_;
};

}  // namespace kiln::distributed::testing
