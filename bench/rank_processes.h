// The benchmarks' own launcher: starts one process per rank of a
// multi-process benchmark and waits for them (bench/allreduce.cpp,
// bench/ddp_lenet.cpp, bench/fsdp.cpp), and joins a rank to the others.
// kiln-run does the same for a user's job; a benchmark starts its ranks
// itself so that one command runs both Kiln's side and the PyTorch
// anchor's, round after round.
//
//   RankRun run = run_ranks({"/usr/bin/python3", "bench/x.py"}, 2, {{"KILN_BENCH_STORE", store}}, true);
//   if (run.failed_rank >= 0) ...;   // run.rank0_output holds rank 0's stdout
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "distributed/init.h"

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

// The driver of a benchmark that starts its own ranks (bench/ddp_lenet.cpp,
// bench/fsdp.cpp): runs this program `world` times with the same arguments
// and KILN_BENCH_STORE naming a file store in a fresh temporary folder.
// The ranks share this process's stdout; only rank 0 writes to it. Returns
// the exit code: 0, or 1 after saying which rank failed (as `program`).
inline int run_self_on_ranks(int argc, char** argv, int world, const std::string& program) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln_" + program + "_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> args{self};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  const RankRun run =
      run_ranks(args, world, {{"KILN_BENCH_STORE", "file://" + (dir / "store").string()}}, /*capture_rank0=*/false);
  std::filesystem::remove_all(dir);
  if (run.failed_rank >= 0) {
    std::fprintf(stderr, "%s: rank %d of %d failed (its message is above); stopped the others\n", program.c_str(),
                 run.failed_rank, world);
    return 1;
  }
  return 0;
}

// main() of a benchmark that starts its own ranks: parses the command line
// with `parse` (which gives an Options with a `world`), then, in a rank
// (RANK set), runs run_rank(options), and otherwise starts the ranks with
// run_self_on_ranks. An exception is printed as "program[ rank R]: what"
// and exits 1.
template <class Parse, class RunRank>
int rank_program_main(int argc, char** argv, const std::string& program, Parse parse, RunRank run_rank) {
  try {
    const auto options = parse(argc, argv);
    if (std::getenv("RANK")) return run_rank(options);
    return run_self_on_ranks(argc, argv, options.world, program);
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "%s%s%s: %s\n", program.c_str(), rank ? " rank " : "", rank ? rank : "", e.what());
    return 1;
  }
}

// A rank's gloo process group: through the driver's file store
// (KILN_BENCH_STORE, with RANK and WORLD_SIZE) or, started by a launcher
// such as kiln-run, through env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
inline void init_rank_process_group() {
  const char* store = std::getenv("KILN_BENCH_STORE");
  distributed::init_process_group("gloo", store ? store : "env://", store ? std::atoi(std::getenv("WORLD_SIZE")) : -1,
                                  store ? std::atoi(std::getenv("RANK")) : -1, std::chrono::seconds(120));
}

}  // namespace kiln::bench
