// Multi-process tests: one TEST body, run by several processes at once.
//
// Note [Multi-process tests]
// A collective needs its ranks to be separate processes, as in a real job.
// run_on_ranks() works as PyTorch's MultiProcessTestCase:
//
//   TEST(Gloo, AllReduceSums) {
//     run_on_ranks(3, [](int rank) {
//       auto group = make_test_group("gloo", std::chrono::seconds(5));
//       Tensor t = full({4}, double(rank + 1), DType::Float64);
//       group->all_reduce(t)->wait();
//       EXPECT_EQ(t.at<double>({0}), 6.0);
//     });
//   }
//
// - In the test process (the parent) it starts the test binary again once
//   per rank (/proc/self/exe, with exec, never a bare fork: the parent may
//   have OpenMP and other threads whose locks a forked child would inherit
//   held), with --gtest_filter naming exactly this test and the environment
//   variables KILN_TEST_RANK, KILN_TEST_WORLD_SIZE and KILN_TEST_STORE_DIR (a
//   fresh directory, removed afterwards).
// - In a rank process the same TEST runs, reaches the same run_on_ranks()
//   call, sees KILN_TEST_RANK and runs body(rank) in place. A test that calls
//   run_on_ranks() twice gets two sets of processes; each runs only the body
//   of the call that started it (KILN_TEST_CALL numbers them).
// - The parent collects each rank's stdout and stderr through a pipe. When
//   every rank passes it prints nothing (ctest logs stay short; set
//   KILN_TEST_SHOW_RANK_OUTPUT=1 to see it anyway); when one fails, the test
//   fails with a line per failing rank and every rank's output, each line
//   prefixed "[rank R] ".
// - Nothing outlives the test: ranks that have not exited by the deadline
//   are killed (with everything they started, as each rank leads its own
//   process group) and reported as "rank R did not finish within N s". Once
//   a rank has failed, the others get `after_failure` more to report their
//   side (a peer's timeout naming the dead rank is the interesting part) and
//   are then killed too.
// - With Launcher::Mpirun the ranks are started by
//   `mpirun --allow-run-as-root --oversubscribe -np N` instead and take their
//   rank from OMPI_COMM_WORLD_RANK; mpirun then reports for all of them
//   together.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "distributed/process_group.h"

namespace kiln::distributed::testing {

enum class Launcher {
  Exec,    // the parent starts each rank itself
  Mpirun,  // mpirun starts them (for the MPI backend)
};

struct RankOptions {
  // Ranks still running after this long are killed and the test fails.
  std::chrono::milliseconds deadline = std::chrono::seconds(30);
  // After the first rank fails, how long the others may still run.
  std::chrono::milliseconds after_failure = std::chrono::seconds(5);
  // Ranks that must end by a signal, e.g. {{1, SIGKILL}} for a test whose
  // rank 1 kills itself to play a crashed peer. Any other ending fails.
  // (Exec launcher only.)
  std::map<int, int> expect_killed_by_signal;
  Launcher launcher = Launcher::Exec;
};

// Runs body(rank) in `world_size` processes (Note [Multi-process tests]);
// gtest failures in any rank fail the calling test. Call it from a TEST body.
void run_on_ranks(int world_size, const std::function<void(int rank)>& body, RankOptions options = {});

// True in a rank process started by run_on_ranks().
bool in_rank_process();
// This rank process's rank, world size and scratch directory (shared by the
// ranks of one run_on_ranks() call); each throws outside a rank process.
int test_rank();
int test_world_size();
std::string test_store_dir();

// A process group of `backend` ("gloo", "mpi") over all ranks of this
// run_on_ranks() call, meeting through a FileStore in test_store_dir();
// `timeout` bounds the rendezvous and every collective. Call it from the body.
// Groups made one after another in the same order on every rank are distinct.
std::shared_ptr<ProcessGroup> make_test_group(const std::string& backend, std::chrono::milliseconds timeout);

}  // namespace kiln::distributed::testing
