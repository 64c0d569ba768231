// kiln-run with a real distributed program: the processes it starts are
// this test binary again, running the same TEST's job branch (the variable
// KILN_RUN_JOB says which), which meets its peers with
// init_process_group("gloo") through the launcher's environment and store.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "distributed/init.h"
#include "kiln_run_process.h"
#include "tensor/factory.h"

namespace kiln::apps::run {
namespace {

using namespace testing;

const char* job_mode() { return std::getenv("KILN_RUN_JOB"); }

// In a process started by kiln-run: an all_reduce over the whole job, or,
// with KILN_RUN_JOB=die, rank 1 killing itself while the others wait.
void run_job() {
  const std::string mode = job_mode();
  distributed::init_process_group("gloo", "env://", -1, -1, std::chrono::seconds(10));
  const int rank = distributed::get_rank();
  if (mode == "die") {
    if (rank == 1) ::raise(SIGKILL);
    // The others wait for kiln-run to stop them. (A collective here would
    // fail on the dead peer, and its exit could reach kiln-run before rank
    // 1's death does; ProcessGroupGloo's tests cover that side.)
    std::this_thread::sleep_for(std::chrono::seconds(10));
    return;
  }
  Tensor t = full({4}, double(rank + 1), DType::Float64);
  distributed::all_reduce(t);
  std::printf("job rank %d of %d: sum %g\n", rank, distributed::get_world_size(), t.at<double>({3}));
  std::fflush(stdout);
  distributed::destroy_process_group();
}

// The test binary itself (kiln-run's /proc/self/exe would be kiln-run).
std::string this_program() {
  char path[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

std::vector<std::string> job_argv(const std::string& test_name) {
  return {this_program(), "--gtest_filter=KilnRunJob." + test_name};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(KilnRunJob, ThreeProcessesAllReduceThroughTheLaunchersStore) {
  if (job_mode()) return run_job();
  std::vector<std::string> args = {"--nproc-per-node", "3", "--master-port", "0"};
  for (const auto& a : job_argv("ThreeProcessesAllReduceThroughTheLaunchersStore")) args.push_back(a);
  const RunResult r = run_kiln_run(args, 20s, {{"KILN_RUN_JOB", "sum"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string line = "[rank " + std::to_string(rank) + "] job rank " + std::to_string(rank) + " of 3: sum 6";
    EXPECT_TRUE(contains(r.out, line)) << line << "\nin:\n" << r.out;
  }
}

TEST(KilnRunJob, TwoNodesOfTwoProcessesMakeOneJob) {
  if (job_mode()) return run_job();
  ::setenv("KILN_RUN_JOB", "sum", 1);  // inherited by both launchers
  const auto nodes = run_two_nodes(2, job_argv("TwoNodesOfTwoProcessesMakeOneJob"), 20s);
  ::unsetenv("KILN_RUN_JOB");
  ASSERT_EQ(nodes[0].exit_code, 0) << nodes[0].out << nodes[0].err;
  ASSERT_EQ(nodes[1].exit_code, 0) << nodes[1].out << nodes[1].err;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string line = "[rank " + std::to_string(rank) + "] job rank " + std::to_string(rank) + " of 4: sum 10";
    EXPECT_TRUE(contains(nodes[static_cast<size_t>(rank / 2)].out, line)) << line;
  }
}

TEST(KilnRunJob, ARankThatDiesEndsTheJobAndIsNamed) {
  if (job_mode()) return run_job();
  std::vector<std::string> args = {"--nproc-per-node", "2", "--master-port", "0"};
  for (const auto& a : job_argv("ARankThatDiesEndsTheJobAndIsNamed")) args.push_back(a);
  const RunResult r = run_kiln_run(args, 20s, {{"KILN_RUN_JOB", "die"}});
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "kiln-run: rank 1 (local rank 1, pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "was killed by signal 9 (SIGKILL)")) << r.err;
  EXPECT_LT(r.seconds, 15.0);
  EXPECT_FALSE(contains(r.out, "sum")) << r.out;
}

}  // namespace
}  // namespace kiln::apps::run

#endif  // KILN_WITH_GLOO
