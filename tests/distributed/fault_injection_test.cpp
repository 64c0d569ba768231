// Ranks that disagree, stop or die: every rank must fail with an error that
// names what happened, within seconds, never compute a wrong result and
// never hang (Note [Always-on collective agreement], Note [Heartbeat]).
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/backends/gloo/call_exchange.h"
#include "distributed/backends/gloo/process_group_gloo.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/file_store.h"
#include "distributed/init.h"
#include "kiln.h"
#include "multi_process.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "store_test_util.h"

namespace kiln::distributed::testing {
namespace {

namespace F = nn::functional;
using std::chrono::milliseconds;

// Long enough that a check that only fired at the timeout fails the
// "within seconds" expectations below.
constexpr milliseconds kLongTimeout(30000);

// Both Gloo paths: shared memory (every rank on this host) and TCP
// (KILN_GLOO_SHM=0), where the calls travel in the first messages (Note [Calls in the first message]).
constexpr const char* kPaths[] = {"1", "0"};

std::shared_ptr<ProcessGroupGloo> make_group(const char* shm, milliseconds heartbeat_timeout = milliseconds(10000),
                                             bool debug = false) {
  ::setenv("KILN_GLOO_SHM", shm, 1);
  auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, kLongTimeout);
  ProcessGroupOptions options;
  options.timeout = kLongTimeout;
  options.heartbeat_timeout = heartbeat_timeout;
  options.debug = debug;
  auto group = std::make_shared<ProcessGroupGloo>(store, test_rank(), test_world_size(), options);
  EXPECT_EQ(group->uses_shared_memory(), std::string(shm) == "1");
  return group;
}

// No shared-memory segment of this process is left behind.
void expect_no_segment_left() {
  const std::string prefix = "kiln-gloo-" + std::to_string(::getpid()) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_NE(entry.path().filename().string().rfind(prefix, 0), 0u) << entry.path();
  }
}

// The sockets this process holds (listening ones included), from /proc/self/fd.
int open_sockets() {
  int sockets = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target.string().rfind("socket:", 0) == 0) ++sockets;
  }
  return sockets;
}

struct Mismatch {
  const char* name;
  // The collective each rank calls (by rank) and what rank 0's and the
  // differing rank's calls must be described as.
  std::function<WorkPtr(ProcessGroup&, int rank)> call;
  std::string rank0_call;
  std::string other_call;
};

std::vector<Mismatch> mismatches() {
  return {
      {"element count",
       [](ProcessGroup& g, int rank) { return g.all_reduce(ones({rank == 0 ? 10 : 1000}, DType::Float32)); },
       "all_reduce(float32, 10 elements, sum)", "all_reduce(float32, 1000 elements, sum)"},
      {"dtype",
       [](ProcessGroup& g, int rank) {
         return g.all_reduce(ones({10}, rank == 0 ? DType::Float32 : DType::Int32));
       },
       "all_reduce(float32, 10 elements, sum)", "all_reduce(int32, 10 elements, sum)"},
      {"reduce op",
       [](ProcessGroup& g, int rank) {
         return g.all_reduce(ones({10}, DType::Float32), rank == 0 ? ReduceOp::Sum : ReduceOp::Max);
       },
       "all_reduce(float32, 10 elements, sum)", "all_reduce(float32, 10 elements, max)"},
      {"root",
       [](ProcessGroup& g, int rank) { return g.broadcast(ones({10}, DType::Float32), rank == 0 ? 0 : 1); },
       "broadcast(float32, 10 elements, root 0)", "broadcast(float32, 10 elements, root 1)"},
      {"collective",
       [](ProcessGroup& g, int rank) {
         Tensor t = ones({10}, DType::Float32);
         return rank == 0 ? g.all_reduce(t) : g.broadcast(t, 0);
       },
       "all_reduce(float32, 10 elements, sum)", "broadcast(float32, 10 elements, root 0)"},
  };
}

TEST(FaultInjection, RanksThatDisagreeOnACollectiveAllFailAtOnceNamingBothCalls) {
  for (const char* shm : kPaths) {
    for (size_t m = 0; m < mismatches().size(); ++m) {
      SCOPED_TRACE(std::string("KILN_GLOO_SHM=") + shm + ", mismatched " + mismatches()[m].name);
      run_on_ranks(2, [shm, m](int rank) {
        const Mismatch mismatch = mismatches()[m];
        const int sockets_before = open_sockets();
        auto group = make_group(shm);
        group->barrier()->wait();  // #1, agreed
        const auto start = std::chrono::steady_clock::now();
        const std::string error = error_of([&] { mismatch.call(*group, rank)->wait(); });
        const double elapsed = seconds_since(start);
        std::printf("rank %d, mismatched %s (KILN_GLOO_SHM=%s), after %.3f s:\n%s\n", rank, mismatch.name, shm,
                    elapsed, error.c_str());
        EXPECT_LT(elapsed, 5.0) << error;
        EXPECT_NE(error.find("collective #2 "), std::string::npos) << error;
        EXPECT_NE(error.find("the ranks of group 'default' disagree on collective #2: rank 0 calls " + mismatch.rank0_call + " but rank 1 calls " +
                             mismatch.other_call),
                  std::string::npos)
            << error;
        // The group is unusable afterwards, and says so at once.
        const std::string again = error_of([&] { group->barrier(); });
        EXPECT_NE(again.find("cannot be used after an earlier collective failed"), std::string::npos) << again;
        expect_no_segment_left();
        // Destroying the failed group leaves no connection or listening port behind.
        group.reset();
        EXPECT_EQ(open_sockets(), sockets_before);
      });
    }
  }
}

TEST(FaultInjection, TheFirstOfThreeRanksThatDiffersIsNamed) {
  for (const char* shm : kPaths) {
    run_on_ranks(3, [shm](int rank) {
      auto group = make_group(shm);
      Tensor t = ones({rank == 2 ? 7 : 5}, DType::Float64);
      const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
      EXPECT_NE(error.find("rank 0 calls all_reduce(float64, 5 elements, sum) but rank 2 calls "
                           "all_reduce(float64, 7 elements, sum)"),
                std::string::npos)
          << error;
      EXPECT_NE(error.find("rank 1 all_reduce(float64, 5 elements, sum)"), std::string::npos) << error;
      // Nothing was reduced: the input is as it was.
      EXPECT_EQ(sum(t).item<double>(), rank == 2 ? 7.0 : 5.0);
    });
  }
}

TEST(FaultInjection, EveryRankLearnsEveryCallOverTcpOnWorldSizesThatAreNotPowersOfTwo) {
  // Note [Calls in the first message]: a header lists only the calls its
  // sender knows before the step. On 6 ranks Bruck's pattern takes 3 steps
  // (1, 2 and 4 calls per header, the last overlapping what the receiver
  // knows); on 8, recursive doubling takes 3 (1, 2 and 4). Every rank must
  // still name every rank's call.
  for (const int world : {6, 8}) {
    SCOPED_TRACE("world size " + std::to_string(world));
    run_on_ranks(world, [world](int rank) {
      auto group = make_group("0");
      Tensor t = ones({rank == 4 ? 9 : 3}, DType::Float32);
      const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
      EXPECT_NE(error.find("rank 0 calls all_reduce(float32, 3 elements, sum) but rank 4 calls "
                           "all_reduce(float32, 9 elements, sum)"),
                std::string::npos)
          << error;
      for (int r = 0; r < world; ++r) {
        const std::string call = "rank " + std::to_string(r) + " all_reduce(float32, " + (r == 4 ? "9" : "3") +
                                 " elements, sum)";
        EXPECT_NE(error.find(call), std::string::npos) << call << " missing from: " << error;
      }
      EXPECT_EQ(sum(t).item<float>(), rank == 4 ? 9.0f : 3.0f);
    });
  }
}

TEST(FaultInjection, AllReducesOnDifferentTcpAlgorithmsStillFailAtOnce) {
  // Over TCP a small all-reduce goes by recursive doubling, which carries
  // the calls in its steps, and a large or empty one by the ring after an
  // exchange of calls with every rank (Note [Gloo all-reduce algorithms]):
  // ranks on different paths must still all fail at once.
  struct Case {
    const char* name;
    int64_t rank3_elements;
  };
  for (const Case c : {Case{"one rank above the recursive-doubling limit", int64_t{2} << 20},
                       Case{"one rank empty", 0}, Case{"all small", 11}}) {
    SCOPED_TRACE(c.name);
    run_on_ranks(4, [c](int rank) {
      auto group = make_group("0");
      Tensor t = ones({rank == 3 ? c.rank3_elements : 10}, DType::Float32);
      const auto start = std::chrono::steady_clock::now();
      const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
      EXPECT_LT(seconds_since(start), 5.0) << error;
      EXPECT_NE(error.find("disagree on collective #1"), std::string::npos) << error;
      EXPECT_NE(error.find("all_reduce(float32, " + std::to_string(c.rank3_elements) + " element"),
                std::string::npos)
          << error;
    });
  }
}

TEST(FaultInjection, TcpAllReducesLargerThanTheFirstMessageFailAtOnceAndLeaveTheirInputs) {
  // Note [Calls in the first message]: beyond kFirstMessageData a step's
  // data goes as a second message on a slot of its exact length. Rests of
  // different lengths never meet, rests of equal length (the same bytes in
  // another dtype) are received whole, and no rank's input is written
  // before every call is known to agree, also on 4 ranks, where ranks 0 and
  // 1 agree with each other in the first step and meet ranks 2 and 3 only
  // in the second.
  const int64_t above = static_cast<int64_t>(gloo_backend::kFirstMessageData / 4) * 3;  // float32 elements
  struct Case {
    const char* name;
    int world;
    std::function<Tensor(int rank)> input;
    std::string rank0_call;
    std::string other_call;  // of the first rank that differs
  };
  const std::string n = std::to_string(above);
  const std::string n2 = std::to_string(above + 5000);
  const std::vector<Case> cases = {
      {"rests of different lengths", 2,
       [=](int rank) { return full({rank == 0 ? above : above + 5000}, 1.5, DType::Float32); },
       "all_reduce(float32, " + n + " elements, sum)", "all_reduce(float32, " + n2 + " elements, sum)"},
      {"equal rests in another dtype", 2,
       [=](int rank) { return full({above}, 2.0, rank == 0 ? DType::Float32 : DType::Int32); },
       "all_reduce(float32, " + n + " elements, sum)", "all_reduce(int32, " + n + " elements, sum)"},
      {"one rest and none", 2, [=](int rank) { return full({rank == 0 ? above : 10}, 3.0, DType::Float32); },
       "all_reduce(float32, " + n + " elements, sum)", "all_reduce(float32, 10 elements, sum)"},
      {"pairs that agree among themselves", 4,
       [=](int rank) { return full({rank < 2 ? above : above + 5000}, 1.0 + rank, DType::Float32); },
       "all_reduce(float32, " + n + " elements, sum)", "all_reduce(float32, " + n2 + " elements, sum)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    run_on_ranks(cases[i].world, [&cases, i](int rank) {
      const Case& c = cases[i];
      auto group = make_group("0");
      Tensor t = c.input(rank);
      const Tensor before = t.clone();
      const auto start = std::chrono::steady_clock::now();
      const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
      EXPECT_LT(seconds_since(start), 5.0) << error;
      EXPECT_NE(error.find("disagree on collective #1: rank 0 calls " + c.rank0_call + " but rank "),
                std::string::npos)
          << error;
      EXPECT_NE(error.find(" calls " + c.other_call), std::string::npos) << error;
      EXPECT_TRUE(equal(t, before)) << "rank " << rank << "'s input was written";
    });
  }
}

TEST(FaultInjection, DdpRanksWithDifferentNumbersOfBatchesFailInsteadOfMixingGradients) {
  // Rank 1's data is one batch shorter: it reaches the end-of-epoch
  // all-reduce of its metrics while rank 0 still reduces gradients.
  run_on_ranks(2, [](int rank) {
    auto group = make_group("1");
    manual_seed(5);
    DDPOptions options;
    options.group = group;
    auto ddp = std::make_shared<DistributedDataParallel>(std::make_shared<nn::Linear>(6, 3), options);
    const int steps = rank == 0 ? 3 : 2;
    const std::string error = error_of([&] {
      for (int s = 0; s < steps; ++s) {
        Tensor x = randn({4, 6});
        Tensor y = randint(0, 3, {4}, DType::Int64);
        F::cross_entropy(ddp->forward(x), y).backward();
      }
      Tensor metrics = zeros({2}, DType::Float64);  // (loss sum, samples)
      group->all_reduce(metrics)->wait();
    });
    std::printf("rank %d:\n%s\n", rank, error.c_str());
    EXPECT_NE(error.find("disagree on collective #"), std::string::npos) << error;
    EXPECT_NE(error.find("all_reduce(float64, 2 elements, sum)"), std::string::npos) << error;
    EXPECT_NE(error.find("all_reduce(float32, 21 elements, sum)"), std::string::npos) << error;
  });
}

TEST(FaultInjection, AStoppedRankIsNamedWithinTheHeartbeatTimeout) {
  RankOptions options;
  options.expect_killed_by_signal = {{1, SIGKILL}};
  for (const char* shm : kPaths) {
    run_on_ranks(
        2,
        [shm](int rank) {
          auto group = make_group(shm, /*heartbeat_timeout=*/milliseconds(1000));
          group->barrier()->wait();
          if (rank == 1) {
            group->store()->set("pid", std::to_string(::getpid()));
            ::raise(SIGSTOP);  // stopped for good: rank 0 kills it
          }
          const std::string pid = group->store()->get_string("pid");
          Tensor t = ones({1000}, DType::Float32);
          const auto start = std::chrono::steady_clock::now();
          const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
          const double elapsed = seconds_since(start);
          ::kill(std::stoi(pid), SIGKILL);
          std::printf("a stopped peer (KILN_GLOO_SHM=%s), after %.2f s:\n%s\n", shm, elapsed, error.c_str());
          // One heartbeat timeout (1 s) from the first look, plus a check
          // interval and the report's grace; the collective timeout is 30 s.
          EXPECT_LT(elapsed, 5.0) << error;
          EXPECT_NE(error.find("collective #2 all_reduce(float32 [1000], sum)"), std::string::npos) << error;
          EXPECT_NE(error.find("stopped waiting: rank 1 (pid " + pid + ", host "), std::string::npos) << error;
          EXPECT_NE(error.find("has not answered for "), std::string::npos) << error;
          EXPECT_NE(error.find("its last collective was #1 barrier()"), std::string::npos) << error;
        },
        options);
  }
}

TEST(FaultInjection, DebugModeFindsADeadPeerWithoutWaitingForTheTimeout) {
  RankOptions options;
  options.expect_killed_by_signal = {{1, SIGKILL}};
  run_on_ranks(
      2,
      [](int rank) {
        auto group = make_group("1", milliseconds(10000), /*debug=*/true);
        group->barrier()->wait();
        if (rank == 1) ::raise(SIGKILL);
        std::this_thread::sleep_for(milliseconds(200));
        const auto start = std::chrono::steady_clock::now();
        const std::string error = error_of([&] { group->all_reduce(ones({4}))->wait(); });
        const double elapsed = seconds_since(start);
        std::printf("debug mode, a dead peer, after %.2f s:\n%s\n", elapsed, error.c_str());
        // The pid check runs every check interval (2 s for a 10 s heartbeat timeout).
        EXPECT_LT(elapsed, 5.0) << error;
        EXPECT_NE(error.find("debug check: not every rank reached it"), std::string::npos) << error;
        EXPECT_NE(error.find("rank 1 (pid "), std::string::npos) << error;
        EXPECT_NE(error.find("is no longer running"), std::string::npos) << error;
      },
      options);
}

TEST(FaultInjection, ARecvOfAnotherSizeThanItsSendFailsNamingBoth) {
  // Note [Point-to-point preamble]: the receiving rank raises; the sender's
  // data is drained, so the sender completes and the pair stays usable.
  struct Case {
    int64_t sent;
    int64_t received;
  };
  for (const char* shm : kPaths) {
    // Small sends ride in the first message; above 65,536 float32 elements
    // (256 KiB) the data follows as a second message (Note [Point-to-point
    // preamble]): each way of disagreeing, and the sender still completes.
    for (const Case c : {Case{10, 5}, Case{5, 10}, Case{0, 3}, Case{100000, 70000}, Case{100000, 10},
                         Case{10, 100000}}) {
      run_on_ranks(2, [shm, c](int rank) {
        auto group = make_group(shm);
        const std::string error = error_of([&] {
          if (rank == 0) {
            group->send(ones({c.sent}, DType::Float32), 1, 4);
          } else {
            Tensor t = zeros({c.received}, DType::Float32);
            group->recv(t, 0, 4);
          }
        });
        if (rank == 0) {
          EXPECT_EQ(error, "<no error>");
        } else {
          EXPECT_NE(error.find("recv(float32 [" + std::to_string(c.received) + "]) from rank 0 tag 4"),
                    std::string::npos)
              << error;
          EXPECT_NE(error.find("rank 0 sends float32, " + std::to_string(c.sent) +
                               " elements but rank 1 receives float32, " + std::to_string(c.received) +
                               " elements"),
                    std::string::npos)
              << error;
        }
      });
    }
  }
}

TEST(FaultInjection, TimeoutsComeFromTheEnvironmentAndBadValuesAreNamed) {
  ::unsetenv("KILN_DISTRIBUTED_TIMEOUT");
  ::unsetenv("KILN_HEARTBEAT_TIMEOUT");
  EXPECT_EQ(timeout_from_env(milliseconds(0)), kDefaultTimeout);
  EXPECT_EQ(heartbeat_timeout_from_env(milliseconds(0)), kDefaultHeartbeatTimeout);
  ::setenv("KILN_DISTRIBUTED_TIMEOUT", "2.5", 1);
  ::setenv("KILN_HEARTBEAT_TIMEOUT", "0.2", 1);
  EXPECT_EQ(timeout_from_env(milliseconds(0)), milliseconds(2500));
  EXPECT_EQ(heartbeat_timeout_from_env(milliseconds(0)), milliseconds(200));
  // An argument wins over the environment.
  EXPECT_EQ(timeout_from_env(milliseconds(700)), milliseconds(700));
  for (const char* bad : {"abc", "inf", "nan", "-1", "0", "5s", "1e9"}) {
    ::setenv("KILN_DISTRIBUTED_TIMEOUT", bad, 1);
    const std::string error = error_of([] { timeout_from_env(milliseconds(0)); });
    EXPECT_NE(error.find(std::string("KILN_DISTRIBUTED_TIMEOUT='") + bad + "' must be a number of seconds"),
              std::string::npos)
        << error;
  }
  ::unsetenv("KILN_DISTRIBUTED_TIMEOUT");
  ::unsetenv("KILN_HEARTBEAT_TIMEOUT");
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
