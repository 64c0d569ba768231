// The multi-process test harness itself (Note [Multi-process tests]): ranks
// run the body with their own rank, failures and hangs are reported with the
// ranks' output, expected deaths pass, and mpirun can start the ranks.
#include "multi_process.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace kiln::distributed::testing {
namespace {

// The failures `f` reports in the test process, joined; in a rank process
// it just runs `f`, so that a rank's own failures still fail that rank.
std::string failures_of(const std::function<void()>& f) {
  if (in_rank_process()) {
    f();
    return "";
  }
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    f();
  }
  std::string joined;
  for (int i = 0; i < results.size(); ++i) joined += results.GetTestPartResult(i).message() + std::string("\n");
  return joined;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(MultiProcess, EachRankRunsTheBodyWithItsRank) {
  run_on_ranks(3, [](int rank) {
    EXPECT_TRUE(in_rank_process());
    EXPECT_EQ(rank, test_rank());
    EXPECT_EQ(test_world_size(), 3);
    EXPECT_TRUE(std::filesystem::is_directory(test_store_dir()));
  });
  // The rank processes run this line too.
  EXPECT_EQ(in_rank_process(), std::getenv("KILN_TEST_RANK") != nullptr);
}

TEST(MultiProcess, EachCallOfATestRunsOnlyItsOwnBody) {
  // Both calls' rank processes run this whole TEST; each must run only the
  // body of the call that started it, as the log they share shows.
  const std::string log = "/tmp/kiln_multi_process_calls_" + std::to_string(::getpid());
  if (!in_rank_process()) ::setenv("KILN_HARNESS_CALL_LOG", log.c_str(), 1);
  auto append = [](const std::string& line) {
    std::ofstream(std::getenv("KILN_HARNESS_CALL_LOG"), std::ios::app) << line << "\n";
  };
  run_on_ranks(2, [&](int rank) { append("first " + std::to_string(rank)); });
  run_on_ranks(2, [&](int rank) { append("second " + std::to_string(rank)); });
  if (in_rank_process()) return;
  ::unsetenv("KILN_HARNESS_CALL_LOG");
  std::ifstream in(log);
  std::stringstream lines;
  lines << in.rdbuf();
  std::filesystem::remove(log);
  std::string text = lines.str();
  int first = 0, second = 0;
  for (size_t p = 0; (p = text.find("first", p)) != std::string::npos; ++p) ++first;
  for (size_t p = 0; (p = text.find("second", p)) != std::string::npos; ++p) ++second;
  EXPECT_EQ(first, 2) << text;
  EXPECT_EQ(second, 2) << text;
}

TEST(MultiProcess, AFailingRankFailsTheTestWithItsOutput) {
  const std::string failures = failures_of([] {
    run_on_ranks(2, [](int rank) {
      std::printf("hello from rank %d\n", rank);
      std::fflush(stdout);
      if (rank == 1) std::_Exit(3);
    });
  });
  if (in_rank_process()) return;
  EXPECT_NE(failures.find("rank 1 exited with status 3"), std::string::npos) << failures;
  EXPECT_EQ(failures.find("rank 0 exited"), std::string::npos) << failures;
  EXPECT_NE(failures.find("[rank 1] hello from rank 1"), std::string::npos) << failures;
  EXPECT_NE(failures.find("[rank 0] hello from rank 0"), std::string::npos) << failures;
}

TEST(MultiProcess, AFailedExpectationInARankFailsTheTest) {
  const std::string failures =
      failures_of([] { run_on_ranks(2, [](int rank) { EXPECT_EQ(rank, 0) << "only rank 0 passes"; }); });
  if (in_rank_process()) return;
  EXPECT_NE(failures.find("rank 1 exited with status 1"), std::string::npos) << failures;
  EXPECT_NE(failures.find("[rank 1]"), std::string::npos) << failures;
  EXPECT_NE(failures.find("only rank 0 passes"), std::string::npos) << failures;
}

TEST(MultiProcess, AHungRankIsKilledAtTheDeadline) {
  const auto start = std::chrono::steady_clock::now();
  RankOptions options;
  options.deadline = std::chrono::milliseconds(1500);
  const std::string failures = failures_of([&] {
    run_on_ranks(
        2,
        [](int rank) {
          if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
        },
        options);
  });
  if (in_rank_process()) return;
  EXPECT_NE(failures.find("rank 1 did not finish within 1.5 s and was killed"), std::string::npos) << failures;
  EXPECT_EQ(failures.find("rank 0 did not finish"), std::string::npos) << failures;
  EXPECT_LT(seconds_since(start), 10.0);
}

TEST(MultiProcess, OtherRanksAreStoppedSoonAfterOneFails) {
  const auto start = std::chrono::steady_clock::now();
  RankOptions options;
  options.after_failure = std::chrono::milliseconds(500);
  const std::string failures = failures_of([&] {
    run_on_ranks(
        2,
        [](int rank) {
          if (rank == 0) std::_Exit(2);
          std::this_thread::sleep_for(std::chrono::seconds(60));
        },
        options);
  });
  if (in_rank_process()) return;
  EXPECT_NE(failures.find("rank 0 exited with status 2"), std::string::npos) << failures;
  EXPECT_NE(failures.find("rank 1 did not finish"), std::string::npos) << failures;
  EXPECT_LT(seconds_since(start), 10.0);
}

TEST(MultiProcess, ARankExpectedToDieMustDieByThatSignal) {
  RankOptions options;
  options.expect_killed_by_signal = {{1, SIGKILL}};
  run_on_ranks(
      2,
      [](int rank) {
        if (rank == 1) ::raise(SIGKILL);
      },
      options);

  const std::string failures = failures_of([&] {
    run_on_ranks(
        2, [](int) {}, options);
  });
  if (in_rank_process()) return;
  EXPECT_NE(failures.find("rank 1 exited with status 0 but was expected to be killed by signal 9"), std::string::npos)
      << failures;
}

bool mpirun_available() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

TEST(MultiProcess, MpirunStartsTheRanks) {
  if (!in_rank_process() && !mpirun_available()) GTEST_SKIP() << "mpirun is not installed";
  RankOptions options;
  options.launcher = Launcher::Mpirun;
  run_on_ranks(
      3,
      [](int rank) {
        ASSERT_NE(std::getenv("OMPI_COMM_WORLD_RANK"), nullptr);
        EXPECT_EQ(rank, std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
        EXPECT_EQ(test_world_size(), 3);
        EXPECT_TRUE(std::filesystem::is_directory(test_store_dir()));
      },
      options);
}

TEST(MultiProcess, MpirunReportsAFailingRank) {
  if (!in_rank_process() && !mpirun_available()) GTEST_SKIP() << "mpirun is not installed";
  RankOptions options;
  options.launcher = Launcher::Mpirun;
  const std::string failures = failures_of([&] {
    run_on_ranks(
        2, [](int rank) { EXPECT_NE(rank, 1) << "rank 1 fails under mpirun"; }, options);
  });
  if (in_rank_process()) return;
  EXPECT_NE(failures.find("mpirun (2 ranks) exited with status"), std::string::npos) << failures;
  EXPECT_NE(failures.find("rank 1 fails under mpirun"), std::string::npos) << failures;
}

}  // namespace
}  // namespace kiln::distributed::testing
