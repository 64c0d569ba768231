// init.h, the module-level API: init_process_group with each init method,
// the default group's collectives and sub-groups, destroy and init again,
// every wrong argument, and debug mode's check that all ranks call the same
// collective (Note [Collective fingerprints]).
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "distributed/file_store.h"
#include "distributed/init.h"
#include "distributed/tcp_store.h"
#include "multi_process.h"
#include "store_test_util.h"
#include "tensor/factory.h"

namespace kiln::distributed::testing {
namespace {

using std::chrono::milliseconds;

// A port no one listens on right now (the kernel's pick for port 0). Another
// program could take it before the test binds it; on a test machine that
// is rare enough.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("free_port: cannot bind a socket");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// Rank 0 picks a free port and tells the others through a file store in
// the test's directory.
int shared_free_port(int rank) {
  FileStore meeting(test_store_dir() + "/port", -1, milliseconds(5000));
  if (rank == 0) meeting.set("port", std::to_string(free_port()));
  return std::stoi(meeting.get_string("port"));
}

// The default group's collectives, a sub-group, and get_rank/get_world_size,
// on whatever init method made it.
void check_default_group(int rank, int world_size) {
  ASSERT_TRUE(is_initialized());
  EXPECT_EQ(get_rank(), rank);
  EXPECT_EQ(get_world_size(), world_size);
  EXPECT_EQ(default_group().backend_name(), "gloo");
  EXPECT_EQ(default_group().collective_device(), kCPU);  // gloo moves host memory
  Tensor t = full({3}, double(rank + 1), DType::Float64);
  all_reduce(t);
  EXPECT_EQ(t.at<double>({2}), world_size * (world_size + 1) / 2.0);
  Tensor b = full({2}, double(rank), DType::Int32);
  broadcast(b, world_size - 1);
  EXPECT_EQ(b.at<int32_t>({1}), world_size - 1);
  std::vector<Tensor> gathered;
  for (int r = 0; r < world_size; ++r) gathered.push_back(zeros({1}, DType::Int64));
  all_gather(gathered, full({1}, double(10 * rank), DType::Int64));
  for (int r = 0; r < world_size; ++r) EXPECT_EQ(gathered[r].at<int64_t>({0}), 10 * r);
  barrier();
}

TEST(InitProcessGroup, FileMethodMakesTheDefaultGroupWithSubGroupsAndCanBeMadeAgain) {
  run_on_ranks(3, [](int rank) {
    EXPECT_FALSE(is_initialized());
    init_process_group("gloo", "file://" + test_store_dir() + "/first", 3, rank, milliseconds(5000));
    check_default_group(rank, 3);

    // Ranks 0 and 2 only; rank 1 gets no group but must take part in the call.
    auto pair = new_group({0, 2});
    if (rank == 1) {
      EXPECT_EQ(pair, nullptr);
    } else {
      ASSERT_NE(pair, nullptr);
      EXPECT_EQ(pair->size(), 2);
      EXPECT_EQ(pair->rank(), rank / 2);
      EXPECT_EQ(pair->name(), "group1");
      Tensor t = full({1}, double(rank), DType::Float32);
      all_reduce(t, ReduceOp::Max, pair.get());
      EXPECT_EQ(t.at<float>({0}), 2.0f);
    }
    pair.reset();
    destroy_process_group();
    EXPECT_FALSE(is_initialized());
    EXPECT_NE(error_of([] { get_rank(); }).find("get_rank: the default process group is not initialized"),
              std::string::npos);

    // A second job in the same processes, on a second store.
    init_process_group("gloo", "file://" + test_store_dir() + "/second", 3, rank, milliseconds(5000));
    check_default_group(rank, 3);
    destroy_process_group();
  });
}

TEST(InitProcessGroup, EnvMethodRankZeroServesTheStore) {
  run_on_ranks(2, [](int rank) {
    const int port = shared_free_port(rank);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", "2", 1);
    ::unsetenv("KILN_STORE_SERVED_BY_LAUNCHER");
    init_process_group("gloo", "env://", -1, -1, milliseconds(5000));
    EXPECT_EQ(default_group().store()->describe(), "tcp store at 127.0.0.1:" + std::to_string(port));
    check_default_group(rank, 2);
    destroy_process_group();
  });
}

TEST(InitProcessGroup, EnvMethodWithTheStoreServedByTheLauncher) {
  run_on_ranks(2, [](int rank) {
    // Rank 0 plays kiln-run: it serves the store outside init_process_group,
    // and then connects as a client like rank 1.
    FileStore meeting(test_store_dir() + "/port", -1, milliseconds(5000));
    std::unique_ptr<TCPStoreServer> launcher;
    if (rank == 0) {
      launcher = std::make_unique<TCPStoreServer>("127.0.0.1", 0);
      meeting.set("port", std::to_string(launcher->port()));
    }
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", meeting.get_string("port").c_str(), 1);
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("KILN_STORE_SERVED_BY_LAUNCHER", "1", 1);
    init_process_group("gloo", "env://", -1, -1, milliseconds(5000));
    check_default_group(rank, 2);
    destroy_process_group();
    meeting.add("done", 1);
    meeting.wait({"done"});
    if (rank == 0) {
      // The server outlives the group: wait for rank 1 before stopping it.
      while (meeting.add("done", 0) < 2) std::this_thread::sleep_for(milliseconds(5));
    }
  });
}

TEST(InitProcessGroup, TcpMethodWithExplicitRankAndSize) {
  run_on_ranks(3, [](int rank) {
    const int port = shared_free_port(rank);
    init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), 3, rank, milliseconds(5000));
    check_default_group(rank, 3);
    destroy_process_group();
  });
}

TEST(InitProcessGroup, WrongArgumentsNameWhatIsWrong) {
  TempDir dir;
  const auto fails_with = [](const std::function<void()>& call, const std::string& expected) {
    const std::string error = error_of(call);
    EXPECT_NE(error.find(expected), std::string::npos) << "expected: " << expected << "\ngot: " << error;
    EXPECT_FALSE(is_initialized());
  };
  const milliseconds quick(500);
  fails_with([&] { init_process_group("gloo", "udp://127.0.0.1:1", 2, 0, quick); },
             "init_process_group(init_method='udp://127.0.0.1:1'): unknown init method; use env://, "
             "tcp://HOST:PORT or file:///PATH");
  fails_with([&] { init_process_group("smoke-signals", "env://", 2, 0, quick); },
             "init_process_group: backend 'smoke-signals' is not available in this build; it has [gloo");
  // A backend with a library of its own (Note [Backends as plugins]) that
  // this build lacks is named with the file that is missing.
#ifndef KILN_WITH_NCCL
  fails_with([&] { init_process_group("nccl", "env://", 2, 0, quick); },
             "init_process_group: backend 'nccl' is not available: this Kiln was built without its nccl backend "
             "(KILN_CUDA=OFF): ");
#endif
#ifndef KILN_WITH_MPI
  fails_with([&] { init_process_group("mpi", "env://", 2, 0, quick); },
             "init_process_group: backend 'mpi' is not available: this Kiln was built without its mpi backend "
             "(KILN_MPI=OFF): ");
#endif
  fails_with([&] { init_process_group("gloo", "tcp://127.0.0.1:29500", -1, -1, quick); },
             "tcp:// needs world_size and rank to be given");
  fails_with([&] { init_process_group("gloo", "tcp://127.0.0.1:99999", 2, 0, quick); },
             "port '99999' is not a number in 1..65535");
  fails_with([&] { init_process_group("gloo", "tcp://no-port", 2, 0, quick); }, "'no-port' is not HOST:PORT");
  fails_with([&] { init_process_group("gloo", "file://relative/store", 2, 0, quick); },
             "file:// needs an absolute path");
  fails_with([&] { init_process_group("gloo", "file://" + dir.path() + "/s", 2, 2, quick); },
             "rank 2 is outside 0..1");

  ::unsetenv("RANK");
  ::setenv("WORLD_SIZE", "2", 1);
  fails_with([&] { init_process_group("gloo", "env://", -1, -1, quick); },
             "environment variable RANK is not set (kiln-run and torchrun set it");
  ::setenv("RANK", "one", 1);
  fails_with([&] { init_process_group("gloo", "env://", -1, -1, quick); },
             "environment variable RANK='one' is not a non-negative integer");
  ::setenv("RANK", "0", 1);
  ::unsetenv("MASTER_ADDR");
  fails_with([&] { init_process_group("gloo", "env://", -1, -1, quick); },
             "environment variable MASTER_ADDR is not set");

  // A peer that never comes: the rendezvous ends within the timeout.
  const auto start = std::chrono::steady_clock::now();
  fails_with([&] { init_process_group("gloo", "file://" + dir.path() + "/lonely", 2, 0, quick); },
             "for rank 1 to post its world size; it has not");
  EXPECT_LT(seconds_since(start), 4.0);

  // Twice without destroy_process_group in between.
  init_process_group("gloo", "file://" + dir.path() + "/single", 1, 0, quick);
  const std::string error = error_of([&] { init_process_group("gloo", "file://" + dir.path() + "/x", 1, 0, quick); });
  EXPECT_NE(error.find("init_process_group: the default process group is already initialized (rank 0 of 1)"),
            std::string::npos)
      << error;
  destroy_process_group();
  EXPECT_NE(error_of([] { destroy_process_group(); }).find("not initialized"), std::string::npos);
}

TEST(InitProcessGroup, APortThatIsTakenIsReportedByRankZero) {
  TCPStoreServer taken("127.0.0.1", 0);
  const std::string method = "tcp://127.0.0.1:" + std::to_string(taken.port());
  const std::string error = error_of([&] { init_process_group("gloo", method, 2, 0, milliseconds(500)); });
  EXPECT_NE(error.find("init_process_group(init_method='" + method + "'): rank 0 cannot serve the store on port " +
                       std::to_string(taken.port())),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("cannot listen"), std::string::npos) << error;
  EXPECT_FALSE(is_initialized());
}

// ---- debug mode ------------------------------------------------------------------------

std::shared_ptr<ProcessGroup> make_debug_group(milliseconds timeout) {
  auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, timeout);
  ProcessGroupOptions options;
  options.timeout = timeout;
  options.debug = true;
  return make_process_group("gloo", store, test_world_size(), test_rank(), options);
}

TEST(DebugMode, ACollectiveOfAnotherShapeIsReportedOnEveryRankInsteadOfMixingData) {
  run_on_ranks(2, [](int rank) {
    auto group = make_debug_group(milliseconds(5000));
    Tensor same = ones({4}, DType::Float32);
    group->all_reduce(same)->wait();  // matching calls pass the check
    EXPECT_EQ(same.at<float>({0}), 2.0f);
    Tensor t = ones({4, rank == 0 ? 4 : 5}, DType::Float32);
    const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
    const std::string other = rank == 0 ? "rank 1 calls all_reduce(float32 [4, 5], sum)"
                                        : "rank 0 calls all_reduce(float32 [4, 4], sum)";
    const std::string mine =
        rank == 0 ? "rank 0 calls all_reduce(float32 [4, 4], sum)" : "rank 1 calls all_reduce(float32 [4, 5], sum)";
    EXPECT_NE(error.find("debug check failed: " + mine + " but " + other), std::string::npos) << error;
    EXPECT_NE(error.find("collective #2"), std::string::npos) << error;
    // The data was not touched, and the group refuses further collectives.
    EXPECT_EQ(t.at<float>({0, 0}), 1.0f);
    EXPECT_NE(error_of([&] { group->barrier()->wait(); }), "<no error>");
  });
}

TEST(DebugMode, AnotherCollectiveOrRootIsReported) {
  run_on_ranks(2, [](int rank) {
    auto group = make_debug_group(milliseconds(5000));
    Tensor t = ones({2}, DType::Int64);
    const std::string error =
        error_of([&] { (rank == 0 ? group->broadcast(t, 0) : group->all_reduce(t, ReduceOp::Max))->wait(); });
    EXPECT_NE(error.find(rank == 0 ? "but rank 1 calls all_reduce(int64 [2], max)"
                                   : "but rank 0 calls broadcast(int64 [2], root 0)"),
              std::string::npos)
        << error;
  });
}

TEST(DebugMode, TheEnvironmentVariableTurnsItOnForInitProcessGroup) {
  run_on_ranks(2, [](int rank) {
    ::setenv("KILN_DISTRIBUTED_DEBUG", "1", 1);
    init_process_group("gloo", "file://" + test_store_dir() + "/init", 2, rank, milliseconds(5000));
    EXPECT_TRUE(default_group().debug());
    Tensor t = ones({rank + 1}, DType::Float64);
    const std::string error = error_of([&] { all_reduce(t); });
    EXPECT_NE(error.find("debug check failed"), std::string::npos) << error;
    destroy_process_group();
  });
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
