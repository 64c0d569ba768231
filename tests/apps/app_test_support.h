// Shared by the tests of the apps (kiln-lenet, kiln-gpt): a temporary
// folder, one shared with rank processes, reading files back, the error of
// a command line, and running an app as a child process.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/error.h"

namespace kiln::apps::testing {

// A fresh empty folder under the system temp folder, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A folder shared by the test process and the rank processes it starts
// (tests/distributed/multi_process.h): "<tmp>/<name>-<pid of the test
// process>". Neither made nor removed here.
inline std::string shared_folder(const std::string& name) {
  const char* parent = std::getenv("KILN_TEST_PARENT_PID");
  const std::string pid = parent ? parent : std::to_string(::getpid());
  return (std::filesystem::temp_directory_path() / (name + "-" + pid)).string();
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the kiln::Error that `parse` (an app's parse_command_line)
// throws for the command line `program` `args`..., or "" when it accepts it.
template <class Parse>
std::string command_line_error(Parse parse, const std::string& program, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  try {
    parse(argv);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The outcome of running a program.
struct ProcessResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string out;
  std::string err;
};

// Runs the executable `program` with `args`, stderr to a file. `on_line`,
// when given, sees each stdout line as it arrives together with the child's
// pid (to send it a signal).
inline ProcessResult run_program(const std::string& program, const std::vector<std::string>& args,
                                 const std::string& stderr_path,
                                 const std::function<void(const std::string&, pid_t)>& on_line = {}) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  std::vector<std::string> argv_strings = {program};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  ProcessResult result;
  std::string pending;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) {
    result.out.append(buffer, static_cast<size_t>(n));
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1)) {
      if (on_line) on_line(pending.substr(0, eol), pid);
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.err = read_text(stderr_path);
  return result;
}

}  // namespace kiln::apps::testing
