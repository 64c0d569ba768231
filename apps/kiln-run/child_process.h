// Starting one process of the job: fork, a process group of its own, pipes
// for its output, and exec errors reported back through a pipe that exec
// closes. kiln-run's loop (launcher.cpp) does the rest.
//
//   std::optional<std::string> path = find_program("train", getenv("PATH"));
//   SpawnResult r = spawn(*path, {"train", "--epochs", "3"}, env);
//   if (r.exec_error != 0) ... strerror(r.exec_error) ...
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace kiln::apps::run {

// Where execvp would find `program`: itself if it holds a '/', else the
// first executable regular file named so in the ':'-separated `path` (an
// empty entry is the current directory; a null `path` is the system's
// default search path). None if there is no such file.
std::optional<std::string> find_program(const std::string& program, const char* path);

// A started process. Its stdout and stderr arrive on the two read ends,
// which are non-blocking and close on exec.
struct SpawnResult {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // errno of the failed execve (the process has then been reaped and no
  // fds are open), or 0.
  int exec_error = 0;
};

// Runs `path` with `argv` (argv[0] included) and `env` ("NAME=value") in a
// new process group whose id is its pid, so that signalling -pid reaches
// whatever it starts too. Its stdin is /dev/null (a process outside the
// terminal's foreground group would be stopped for reading the terminal);
// every signal starts with its default action and unblocked; and it gets
// SIGTERM when kiln-run dies (PR_SET_PDEATHSIG), so that a kiln-run killed
// with SIGKILL leaves no processes behind. With `cores`, it runs only on
// those (sched_setaffinity before execve; a failure is reported as the exec
// errors are). Throws kiln::Error when pipes or fork() fail.
SpawnResult spawn(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  const std::vector<int>& cores = {});

// "0-3,8" for {0, 1, 2, 3, 8}: a core list as taskset and /proc write it.
std::string core_list(const std::vector<int>& cores);

// "exited with status 3", "was killed by signal 9 (SIGKILL)": a waitpid()
// status in words, to follow "rank R ".
std::string describe_wait_status(int status);

// The exit code a shell gives for that status: the process's own code, or
// 128 + the signal's number.
int exit_code_of(int status);

// "SIGTERM" for SIGTERM; "signal 64" for a number without a name.
std::string signal_name(int signo);

}  // namespace kiln::apps::run
