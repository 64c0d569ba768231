// The benchmarks' own launcher: starts one process per rank of a
// multi-process benchmark and waits for them (bench/allreduce.cpp,
// bench/ddp_lenet.cpp). kiln-run does the same for a user's job; a benchmark
// starts its ranks itself so that one command runs both Kiln's side and the
// PyTorch anchor's, round after round.
//
//   RankRun run = run_ranks({"/usr/bin/python3", "bench/x.py"}, 2, {{"KILN_BENCH_STORE", store}}, true);
//   if (run.failed_rank >= 0) ...;   // run.rank0_output holds rank 0's stdout
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace kiln::bench {

struct RankRun {
  int failed_rank = -1;     // the first rank seen to fail, or -1
  std::string rank0_output;  // rank 0's stdout, when captured
};

// Runs `argv` once per rank with RANK, WORLD_SIZE, OMP_NUM_THREADS=1 and
// `env` set, and waits for every rank. Rank 0's stdout is captured when
// `capture_rank0`, else all ranks share this process's. When a rank fails
// the others, which would wait for it until their collectives time out, get
// SIGTERM.
inline RankRun run_ranks(const std::vector<std::string>& argv, int world_size,
                         const std::vector<std::pair<std::string, std::string>>& env, bool capture_rank0) {
  int out[2] = {-1, -1};
  if (capture_rank0 && ::pipe(out) != 0) {
    std::perror("run_ranks: pipe");
    std::exit(1);
  }
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (capture_rank0) {
        if (rank == 0) ::dup2(out[1], STDOUT_FILENO);
        ::close(out[0]);
        ::close(out[1]);
      }
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      std::fprintf(stderr, "run_ranks: cannot run %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  RankRun run;
  if (capture_rank0) {
    ::close(out[1]);
    char buffer[4096];
    for (ssize_t n; (n = ::read(out[0], buffer, sizeof(buffer))) > 0;) {
      run.rank0_output.append(buffer, static_cast<size_t>(n));
    }
    ::close(out[0]);
  }
  std::vector<bool> running(pids.size(), true);
  for (size_t left = pids.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) break;
    const auto rank = static_cast<size_t>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    if (rank == pids.size()) continue;
    running[rank] = false;
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || run.failed_rank != -1) continue;
    run.failed_rank = static_cast<int>(rank);
    for (size_t other = 0; other < pids.size(); ++other) {
      if (running[other]) ::kill(pids[other], SIGTERM);
    }
  }
  return run;
}

}  // namespace kiln::bench
