// What is particular to the Gloo backend: how it meets its peers (Note
// [Gloo interface], Note [Gloo rendezvous keys]) and that an operation
// whose peer has died or never comes fails within the group's timeout
// instead of hanging. The collectives themselves are in collectives_test.cpp.
#include <gtest/gtest.h>

#ifdef KILN_WITH_GLOO

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include <gloo/transport/context.h>

#include "distributed/backends/gloo/gloo_device.h"
#include "distributed/backends/gloo/gloo_reduce.h"
#include "distributed/backends/gloo/process_group_gloo.h"
#include "distributed/backends/gloo/call_exchange.h"
#include "distributed/backends/gloo/recursive_doubling.h"
#include "distributed/backends/gloo/shared_memory_all_reduce.h"
#include "distributed/file_store.h"
#include "multi_process.h"
#include "store_test_util.h"
#include "kiln.h"

namespace kiln::distributed::testing {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<ProcessGroup> make_gloo_group(milliseconds timeout) {
  auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, timeout);
  ProcessGroupOptions options;
  options.timeout = timeout;
  return std::make_shared<ProcessGroupGloo>(store, test_rank(), test_world_size(), options);
}

// Both all-reduce paths: shared memory (every rank on this host) and Gloo's
// TCP pairs (KILN_GLOO_SHM=0).
constexpr const char* kAllReducePaths[] = {"1", "0"};

// The group of make_gloo_group, with all-reduces through shared memory
// (shm "1") or over TCP (shm "0"), and checked to be so.
std::shared_ptr<ProcessGroupGloo> make_gloo_group_on_path(const char* shm, milliseconds timeout) {
  ::setenv("KILN_GLOO_SHM", shm, 1);
  auto group = std::static_pointer_cast<ProcessGroupGloo>(make_gloo_group(timeout));
  EXPECT_EQ(group->uses_shared_memory(), std::string(shm) == "1");
  return group;
}

TEST(ProcessGroupGloo, AllReduceFailsSoonAfterThePeerIsKilled) {
  RankOptions options;
  options.expect_killed_by_signal = {{1, SIGKILL}};
  for (const char* shm : kAllReducePaths) {
    run_on_ranks(
        2,
        [shm](int rank) {
          const milliseconds timeout(3000);
          auto group = make_gloo_group_on_path(shm, timeout);
          group->barrier()->wait();
          if (rank == 1) ::raise(SIGKILL);
          // Give the kill time to land, so that rank 0 meets a dead peer rather
          // than one that has not reached the collective yet.
          std::this_thread::sleep_for(milliseconds(200));
          Tensor t = ones({1000}, DType::Float32);
          const auto start = std::chrono::steady_clock::now();
          const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
          const double elapsed = seconds_since(start);
          std::printf("gloo's report of a dead peer (KILN_GLOO_SHM=%s), after %.2f s:\n%s\n", shm, elapsed,
                      error.c_str());
          EXPECT_LT(elapsed, 3.0 + 2.0) << error;
          EXPECT_NE(
              error.find("collective #2 all_reduce(float32 [1000], sum) on group 'default' (gloo, rank 0 of 2)"),
              std::string::npos)
              << error;
          EXPECT_NE(error.find("gloo all_reduce: "), std::string::npos) << error;
          if (std::string(shm) == "1") {
            // Shared memory has no connection to break: the waiting rank
            // finds the peer's process gone.
            EXPECT_NE(error.find("gloo all_reduce: rank 1 of group 'default' (pid "), std::string::npos) << error;
            EXPECT_NE(error.find(") is no longer running; rank 0 was waiting in shared memory for it"),
                      std::string::npos)
                << error;
          }
          // The group is now unusable, and says so without waiting again.
          const std::string again = error_of([&] { group->barrier(); });
          EXPECT_NE(again.find("cannot be used after an earlier collective failed"), std::string::npos) << again;
        },
        options);
  }
}

TEST(ProcessGroupGloo, RecvFailsSoonAfterThePeerIsKilled) {
  RankOptions options;
  options.expect_killed_by_signal = {{1, SIGKILL}};
  run_on_ranks(
      2,
      [](int rank) {
        auto group = make_gloo_group(milliseconds(3000));
        group->barrier()->wait();
        if (rank == 1) ::raise(SIGKILL);
        Tensor t = zeros({4}, DType::Float32);
        const auto start = std::chrono::steady_clock::now();
        const std::string error = error_of([&] { group->recv(t, 1); });
        std::printf("gloo's report of a recv from a dead peer, after %.2f s:\n%s\n", seconds_since(start),
                    error.c_str());
        EXPECT_LT(seconds_since(start), 5.0) << error;
        EXPECT_NE(error.find("recv(float32 [4]) from rank 1 tag 0"), std::string::npos) << error;
        EXPECT_NE(error.find("gloo recv from rank 1 tag 0: "), std::string::npos) << error;
      },
      options);
}

TEST(ProcessGroupGloo, ACollectiveThePeerNeverJoinsTimesOut) {
  for (const char* shm : kAllReducePaths) {
    run_on_ranks(2, [shm](int rank) {
      auto group = make_gloo_group_on_path(shm, milliseconds(1000));
      if (rank == 0) {
        Tensor t = ones({8}, DType::Float64);
        const auto start = std::chrono::steady_clock::now();
        const std::string error = error_of([&] { group->all_reduce(t)->wait(); });
        std::printf("gloo's report of a collective the peer never joins (KILN_GLOO_SHM=%s), after %.2f s:\n%s\n", shm,
                    seconds_since(start), error.c_str());
        EXPECT_LT(seconds_since(start), 4.0) << error;
        EXPECT_NE(error.find("collective #1 all_reduce(float64 [8], sum)"), std::string::npos) << error;
        // The backend's own timeout and the front-end's wait are both 1 s;
        // either may report first (recursive doubling gives gloo what is
        // left of the 1 s).
        EXPECT_TRUE(error.find("Timed out waiting 1000ms") != std::string::npos ||
                    error.find("Timed out waiting 999ms") != std::string::npos ||
                    error.find("waited 1000 ms in shared memory for rank 1, which has not copied its input") !=
                        std::string::npos ||
                    error.find("did not finish within 1000 ms") != std::string::npos)
            << error;
        EXPECT_NE(error.find("Not reached: rank 1 (entered no collective)"), std::string::npos) << error;
        group->store()->set("rank0 done", std::string("1"));
      } else {
        // Rank 1 stays (so that rank 0 meets silence, not a closed
        // connection or a dead process) until rank 0 is done.
        group->store()->wait({"rank0 done"}, milliseconds(8000));
      }
    });
  }
}

TEST(ProcessGroupGloo, DestroyingTheGroupAbortsARecvThatNeverCompletes) {
  run_on_ranks(2, [](int rank) {
    FileStore done(test_store_dir() + "/done", -1, milliseconds(8000));
    if (rank == 0) {
      // A 20 s timeout: the destructor must not wait for it.
      auto group = make_gloo_group(milliseconds(20000));
      {
        Tensor t = zeros({4}, DType::Float32);
        WorkPtr work = group->irecv(t, 1, 5);
        EXPECT_FALSE(work->wait_for(milliseconds(100)));
      }
      const auto start = std::chrono::steady_clock::now();
      group.reset();
      EXPECT_LT(seconds_since(start), 3.0);
      done.set("rank0 done", std::string("1"));
    } else {
      auto group = make_gloo_group(milliseconds(20000));
      // Stays connected, sending nothing, until rank 0 has destroyed its group.
      done.wait({"rank0 done"});
    }
  });
}

TEST(ProcessGroupGloo, RendezvousFailsNamingTheStoreAndThePeerThatNeverArrives) {
  run_on_ranks(2, [](int rank) {
    if (rank == 1) return;  // never creates its group
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of([] { make_gloo_group(milliseconds(500)); });
    EXPECT_LT(seconds_since(start), 4.0);
    EXPECT_EQ(error, "gloo: rank 0 of group 'default' (size 2) waited 500 ms (the rendezvous timeout) through file store " +
                         test_store_dir() +
                         "/store for rank 1 to post its world size; it has not (exited, hung, or never started?)");
  });
}

TEST(ProcessGroupGloo, RanksStartedWithDifferentWorldSizesAreToldSo) {
  // Note [Gloo rendezvous steps], step 1: both ranks say so, each naming the
  // other, and neither waits for its timeout.
  run_on_ranks(2, [](int rank) {
    auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, milliseconds(20000));
    ProcessGroupOptions options;
    options.timeout = milliseconds(20000);
    const int size = rank == 0 ? 2 : 3;
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of([&] { ProcessGroupGloo(store, rank, size, options); });
    EXPECT_LT(seconds_since(start), 10.0);
    if (rank == 0) {
      EXPECT_NE(error.find("gloo: rank 0 of group 'default' was started with WORLD_SIZE=2 but rank 1 with WORLD_SIZE=3; "
                           "every rank must be given the same world size"),
                std::string::npos)
          << error;
    } else {
      EXPECT_NE(error.find("gloo: rank 1 of group 'default' was started with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2"),
                std::string::npos)
          << error;
    }
  });
}

// A peer that posts a pair address and never connects to it: rank 0 either
// listens for it in vain or is refused, and either way gives up within its
// timeout naming the peer and its address (Note [Gloo rendezvous steps],
// step 4), where gloo alone would wait five times the timeout.
TEST(ProcessGroupGloo, APeerThatNeverConnectsItsPairIsNamedWithItsAddress) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path() + "/store", -1, milliseconds(20000));
  // Rank 1's part of the rendezvous, by hand: its size, a generation, its
  // host (this one) and one pair address (for rank 0).
  store->set("gloo/size/1", std::string("2"));
  ASSERT_EQ(store->add("gloo/groups", 1), 1);
  PrefixStore keys("gloo/0", store);
  keys.set("host/1", gloo_backend::this_host(*store).encode());
  std::string peer_address;
  {
    // A real pair address, on a device that is gone again before rank 0
    // connects: nothing listens there any more.
    auto device = gloo_backend::make_tcp_device({"", "127.0.0.1", "loopback"});
    auto context = device->createContext(1, 2);
    const auto& address = context->createPair(0)->address();
    peer_address = address.str();
    const std::vector<char> bytes = address.bytes();
    keys.set("address/1", std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  ProcessGroupOptions options;
  options.timeout = milliseconds(1500);
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { ProcessGroupGloo(store, 0, 2, options); });
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_NE(error.find("gloo: rank 0 of group 'default' (size 2)"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1 at " + peer_address), std::string::npos) << error;
}

TEST(ProcessGroupGloo, GroupsMadeOneAfterAnotherOnOneStoreAreDistinct) {
  // Note [Gloo rendezvous keys]: the second group must not connect to the
  // first one's (closed) addresses.
  run_on_ranks(3, [](int rank) {
    auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, milliseconds(5000));
    ProcessGroupOptions options;
    options.timeout = milliseconds(5000);
    for (int round = 1; round <= 3; ++round) {
      auto group = std::make_shared<ProcessGroupGloo>(store, rank, 3, options);
      Tensor t = full({2}, double(round * (rank + 1)), DType::Int64);
      group->all_reduce(t)->wait();
      EXPECT_EQ(t.at<int64_t>({0}), 6 * round);
    }
  });
}

TEST(ProcessGroupGloo, TheInterfaceComesFromTheEnvironment) {
  run_on_ranks(2, [](int rank) {
    ::unsetenv("GLOO_SOCKET_IFNAME");
    ::setenv("KILN_GLOO_SOCKET_IFNAME", "lo", 1);
    const std::vector<gloo_backend::HostReport> hosts = {{"a", "a", "10.0.0.1"}, {"b", "b", "10.0.0.2"}};
    EXPECT_EQ(gloo_backend::choose_tcp_device(hosts, 1).description, "interface lo (KILN_GLOO_SOCKET_IFNAME)");
    {
      auto group = make_gloo_group(milliseconds(5000));
      Tensor t = full({1}, double(rank + 1), DType::Float32);
      group->all_reduce(t)->wait();
      EXPECT_EQ(t.at<float>({0}), 3.0f);
    }
    ::setenv("KILN_GLOO_SOCKET_IFNAME", "kiln_no_such_if0", 1);
    EXPECT_NE(error_of([&] {
                gloo_backend::make_tcp_device(gloo_backend::choose_tcp_device(hosts, 0));
              }).find("gloo: cannot listen on interface kiln_no_such_if0 (KILN_GLOO_SOCKET_IFNAME): "),
              std::string::npos);
    ::unsetenv("KILN_GLOO_SOCKET_IFNAME");
  });
}

TEST(ProcessGroupGloo, ARankListensWhereItReachesTheStoreAndOnLoopbackOnlyWhenAllShareItsHost) {
  ::unsetenv("GLOO_SOCKET_IFNAME");
  ::unsetenv("KILN_GLOO_SOCKET_IFNAME");
  using gloo_backend::choose_tcp_device;
  // Rule 2: one host, whatever the store connection says.
  const auto one_host = choose_tcp_device({{"h", "vm", "10.0.0.1"}, {"h", "vm", "10.0.0.1"}}, 1);
  EXPECT_EQ(one_host.address, "127.0.0.1");
  EXPECT_EQ(one_host.description, "127.0.0.1 (every rank runs on this host)");
  // Rule 3: two hosts; each listens where it reaches the store.
  const std::vector<gloo_backend::HostReport> two_hosts = {{"a", "node0", "10.0.0.1"}, {"b", "node1", "10.0.0.2"}};
  EXPECT_EQ(choose_tcp_device(two_hosts, 0).address, "10.0.0.1");
  EXPECT_EQ(choose_tcp_device(two_hosts, 1).address, "10.0.0.2");
  EXPECT_EQ(choose_tcp_device(two_hosts, 1).description, "10.0.0.2 (the address this host reaches the store through)");
  // Rule 4: the store's host reaches its store over loopback; it takes the
  // route towards rank 1 instead (here loopback again, so on to rule 5,
  // whose host name resolves only to loopback: nothing to listen on).
  EXPECT_EQ(gloo_backend::local_address_towards("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(gloo_backend::local_address_towards(""), "");
  const auto nowhere = choose_tcp_device({{"a", "localhost", "127.0.0.1"}, {"b", "node1", "127.0.0.1"}}, 0);
  EXPECT_EQ(nowhere.address, "");
  EXPECT_NE(nowhere.description.find("no address: rank 1 runs on another host (node1), and this host's name "
                                     "'localhost' resolves to 127.0.0.1"),
            std::string::npos)
      << nowhere.description;
  // Rule 5 with a FileStore (no store address) and a loopback host name:
  // refused with the variable to set, not a loopback listener.
  const std::string error = error_of([&] {
    gloo_backend::make_tcp_device(choose_tcp_device({{"a", "localhost", ""}, {"b", "node1", ""}}, 0));
  });
  EXPECT_NE(error.find("gloo: cannot listen: no address: rank 1 runs on another host (node1)"), std::string::npos)
      << error;
  EXPECT_NE(error.find("the store has no connection to take an address from (set KILN_GLOO_SOCKET_IFNAME"),
            std::string::npos)
      << error;
  // A report travels through the store and back unchanged.
  const gloo_backend::HostReport report{"boot/net:1", "node0", "10.0.0.1"};
  const auto back = gloo_backend::HostReport::decode(report.encode());
  EXPECT_EQ(back.host_id, report.host_id);
  EXPECT_EQ(back.host_name, report.host_name);
  EXPECT_EQ(back.store_address, report.store_address);
}

// In every build: a CUDA tensor exists only where libkiln_cuda is loaded,
// and gloo stages it through host memory.
TEST(ProcessGroupGloo, AcceptsCpuAndCudaTensors) {
  run_on_ranks(2, [](int) {
    auto group = make_gloo_group(milliseconds(5000));
    EXPECT_EQ(error_of([&] { group->check_device(kCPU, "all_reduce"); }), "<no error>");
    EXPECT_EQ(error_of([&] { group->check_device(cuda_device(0), "all_reduce"); }), "<no error>");
  });
}

// Rank r's input of n float32 values to the all-reduce tests, the same in
// every process.
Tensor rank_values(int r, int64_t n) {
  Generator gen;
  gen.manual_seed(static_cast<uint64_t>(100 * r + n % 97));
  return randn({n}, DType::Float32, &gen);
}

// Note [Gloo all-reduce algorithms]: over TCP, below kRecursiveDoublingMaxBytes
// on 2 and 4 ranks the exchange is recursive doubling, else gloo's ring;
// either way the sum is right and every rank holds the same bits, with the
// agreement check and in a group made without it (bench/agreement_ab's
// baseline, whose steps move the data alone).
TEST(ProcessGroupGloo, AllReduceByRecursiveDoublingOrRingGivesEveryRankTheSameSum) {
  const int64_t small = 1000;  // 4 KB of float32
  const int64_t large = static_cast<int64_t>(gloo_backend::kRecursiveDoublingMaxBytes / 4) + 1000;
  EXPECT_TRUE(gloo_backend::use_recursive_doubling(small * 4, 4));
  EXPECT_FALSE(gloo_backend::use_recursive_doubling(small * 4, 3));
  EXPECT_FALSE(gloo_backend::use_recursive_doubling(large * 4, 2));
  for (int world : {2, 3, 4}) {
    run_on_ranks(world, [=](int rank) {
      ::setenv("KILN_GLOO_SHM", "0", 1);
      auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, milliseconds(20000));
      for (bool check : {true, false}) {
        SCOPED_TRACE(check ? "with the agreement check" : "without the agreement check");
        ProcessGroupOptions options;
        options.name = check ? "checked" : "unchecked";
        options.timeout = milliseconds(20000);
        options.agreement_check = check;
        auto group = std::make_shared<ProcessGroupGloo>(store, rank, world, options);
        ASSERT_FALSE(group->uses_shared_memory());
        // The sizes around the first message's data (Note [Calls in the first
        // message]) and recursive doubling's limit, and an empty one.
        const int64_t first = static_cast<int64_t>(gloo_backend::kFirstMessageData / 4);
        const int64_t limit = static_cast<int64_t>(gloo_backend::kRecursiveDoublingMaxBytes / 4);
        for (int64_t n : {int64_t{0}, int64_t{1}, small, first - 1, first, first + 1, 3 * first + 7, limit, large}) {
          auto values_of = [&](int r) { return rank_values(r, n); };
          Tensor t = values_of(rank);
          group->all_reduce(t)->wait();
          // The float64 sum of every rank's values, rounded once.
          Tensor expected = zeros({n}, DType::Float64);
          for (int r = 0; r < world; ++r) expected = expected + values_of(r).to(DType::Float64);
          if (n > 0) {
            EXPECT_LE(max(abs(t.to(DType::Float64) - expected)).item<double>(), 1e-5) << n << " elements";
          }
          // Every rank's result, bit for bit.
          std::vector<Tensor> all;
          for (int r = 0; r < world; ++r) all.push_back(empty({n}, DType::Float32));
          group->all_gather(all, t)->wait();
          for (int r = 0; r < world; ++r) EXPECT_TRUE(equal(all[r], t)) << "rank " << r << ", " << n << " elements";
        }
      }
    });
  }
}

// Note [Same-host all-reduce through shared memory]: each element is reduced
// once, in rank order, so every rank's result is bitwise the rank-order
// reduction computed here in one process; sizes cover one element, a
// partial chunk, and several chunks with a remainder.
TEST(ProcessGroupGloo, SharedMemoryAllReduceIsTheRankOrderReductionOnEveryRank) {
  const int64_t chunk = static_cast<int64_t>(gloo_backend::kSharedMemorySlotBytes / 4);  // float32 elements
  for (int world : {2, 3, 4}) {
    run_on_ranks(world, [=](int rank) {
      auto group = make_gloo_group_on_path("1", milliseconds(20000));
      for (int64_t n : {int64_t{1}, int64_t{1000}, 2 * chunk + 333}) {
        auto values_of = [&](int r) { return rank_values(r, n); };
        Tensor t = values_of(rank);
        group->all_reduce(t)->wait();
        Tensor in_rank_order = values_of(0);
        for (int r = 1; r < world; ++r) in_rank_order = in_rank_order + values_of(r);
        EXPECT_TRUE(equal(t, in_rank_order)) << n << " elements";
        Tensor exact = zeros({n}, DType::Float64);
        for (int r = 0; r < world; ++r) exact = exact + values_of(r).to(DType::Float64);
        EXPECT_LE(max(abs(t.to(DType::Float64) - exact)).item<double>(), 1e-5) << n << " elements";
      }
      // Other element sizes and ops, with values whose results are exact.
      Tensor big = full({3 * chunk}, double(7 * rank - 3), DType::Int64);  // 8-byte elements, 6 chunks
      group->all_reduce(big, ReduceOp::Max)->wait();
      EXPECT_TRUE(equal(big, full({3 * chunk}, double(7 * (world - 1) - 3), DType::Int64)));
      Tensor halves = full({1001}, double(rank + 1), DType::Float16);  // 2-byte elements
      group->all_reduce(halves)->wait();
      EXPECT_TRUE(equal(halves, full({1001}, double(world * (world + 1) / 2), DType::Float16)));
      Tensor bytes = full({77}, double(rank % 2 == 0 ? 2 : 3), DType::UInt8);  // 1-byte elements
      group->all_reduce(bytes, ReduceOp::Product)->wait();
      double product = 1;
      for (int r = 0; r < world; ++r) product *= r % 2 == 0 ? 2 : 3;
      EXPECT_TRUE(equal(bytes, full({77}, product, DType::UInt8)));
    });
  }
}

// Note [Same-host all-gather and reduce-scatter]: the same slots carry FSDP's
// collectives. Every rank's all-gather must hold every rank's input in rank
// order, and each rank's reduce-scatter block the rank-order sum of that
// block, bitwise, over one element, a partial chunk and several chunks with
// a remainder (the reduce-scatter's chunk is a slot over the world size).
TEST(ProcessGroupGloo, SharedMemoryAllGatherAndReduceScatterMatchTheRankOrderResults) {
  const int64_t chunk = static_cast<int64_t>(gloo_backend::kSharedMemorySlotBytes / 4);  // float32 elements
  for (int world : {2, 3}) {
    run_on_ranks(world, [=](int rank) {
      auto group = make_gloo_group_on_path("1", milliseconds(20000));
      for (int64_t n : {int64_t{1}, int64_t{1000}, 2 * chunk + 333}) {
        Tensor gathered = empty({world * n}, DType::Float32);
        group->all_gather_into_tensor(gathered, rank_values(rank, n))->wait();
        for (int r = 0; r < world; ++r) {
          EXPECT_TRUE(equal(gathered.narrow(0, r * n, n), rank_values(r, n))) << "block " << r << ", " << n;
        }
        // Rank r's input: world blocks of n, block d = rank_values(r + 10 d, n).
        auto input_of = [&](int r) {
          std::vector<Tensor> blocks;
          for (int d = 0; d < world; ++d) blocks.push_back(rank_values(r + 10 * d, n));
          return cat(blocks, 0);
        };
        Tensor mine = empty({n}, DType::Float32);
        group->reduce_scatter_tensor(mine, input_of(rank))->wait();
        Tensor in_rank_order = input_of(0).narrow(0, rank * n, n);
        for (int r = 1; r < world; ++r) in_rank_order = in_rank_order + input_of(r).narrow(0, rank * n, n);
        EXPECT_TRUE(equal(mine, in_rank_order)) << n << " elements";
      }
      // 8-byte elements and another op, exact.
      Tensor big = full({world * chunk}, double(5 * rank + 1), DType::Int64);
      Tensor out = empty({chunk}, DType::Int64);
      group->reduce_scatter_tensor(out, big, ReduceOp::Max)->wait();
      EXPECT_TRUE(equal(out, full({chunk}, double(5 * (world - 1) + 1), DType::Int64)));
    });
  }
}

TEST(ProcessGroupGloo, SharedMemoryIsOffForTheWholeGroupWhenOneRankTurnsItOff) {
  run_on_ranks(2, [](int rank) {
    ::setenv("KILN_GLOO_SHM", rank == 1 ? "0" : "1", 1);
    auto group = std::static_pointer_cast<ProcessGroupGloo>(make_gloo_group(milliseconds(5000)));
    EXPECT_FALSE(group->uses_shared_memory());
    Tensor t = full({10}, double(rank + 1), DType::Float32);
    group->all_reduce(t)->wait();
    EXPECT_TRUE(equal(t, full({10}, 3.0, DType::Float32)));
  });
}

TEST(ProcessGroupGloo, TheSharedMemorySegmentIsUnlinkedOnceEveryRankHasMappedIt) {
  run_on_ranks(2, [](int rank) {
    auto group = make_gloo_group_on_path("1", milliseconds(5000));
    group->barrier()->wait();
    if (rank == 0) {
      // Rank 0 made the segment, named after its pid; the mappings keep it,
      // but nothing is left in /dev/shm to leak if a rank dies.
      const std::string prefix = "kiln-gloo-" + std::to_string(::getpid()) + "-";
      for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
        EXPECT_NE(entry.path().filename().string().rfind(prefix, 0), 0u) << entry.path();
      }
    }
    Tensor t = full({10}, double(rank + 1), DType::Float32);
    group->all_reduce(t)->wait();
    EXPECT_TRUE(equal(t, full({10}, 3.0, DType::Float32)));
  });
}

// The reduction functions on their own, where the multi-process tests'
// small integers do not reach: wrap-around, NaN and rounding.
TEST(GlooReduce, IntegersWrapNanPropagatesHalfPrecisionRounds) {
  int8_t a8[2] = {120, -100}, b8[2] = {10, -100}, c8[2];
  gloo_backend::reduce_function(DType::Int8, ReduceOp::Sum)(c8, a8, b8, 2);
  EXPECT_EQ(c8[0], -126);  // 130 wraps
  EXPECT_EQ(c8[1], 56);    // -200 wraps
  uint8_t a[1] = {200}, b[1] = {2}, c[1];
  gloo_backend::reduce_function(DType::UInt8, ReduceOp::Product)(c, a, b, 1);
  EXPECT_EQ(c[0], 144);  // 400 mod 256
  int64_t big[1] = {INT64_MAX}, one[1] = {1}, wrapped[1];
  gloo_backend::reduce_function(DType::Int64, ReduceOp::Sum)(wrapped, big, one, 1);
  EXPECT_EQ(wrapped[0], INT64_MIN);

  const float nan = std::nanf("");
  float x[3] = {nan, 1.0f, 2.0f}, y[3] = {3.0f, nan, 1.0f}, mx[3], mn[3];
  gloo_backend::reduce_function(DType::Float32, ReduceOp::Max)(mx, x, y, 3);
  gloo_backend::reduce_function(DType::Float32, ReduceOp::Min)(mn, x, y, 3);
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[2], 2.0f);
  EXPECT_EQ(mn[2], 1.0f);

  // bfloat16 keeps 8 significant bits: 256 + 1 rounds back to 256, and the
  // sum is rounded, not truncated: 256 + 3 = 259 -> 260.
  BFloat16 p[2] = {BFloat16(256.0f), BFloat16(256.0f)}, q[2] = {BFloat16(1.0f), BFloat16(3.0f)}, r[2];
  gloo_backend::reduce_function(DType::BFloat16, ReduceOp::Sum)(r, p, q, 2);
  EXPECT_EQ(static_cast<float>(r[0]), 256.0f);
  EXPECT_EQ(static_cast<float>(r[1]), 260.0f);
  Half h[1] = {Half(0.5f)}, k[1] = {Half(0.25f)}, hr[1];
  gloo_backend::reduce_function(DType::Float16, ReduceOp::Product)(hr, h, k, 1);
  EXPECT_EQ(static_cast<float>(hr[0]), 0.125f);

  bool t[2] = {true, false}, f[2] = {false, false}, any[2], all[2];
  gloo_backend::reduce_function(DType::Bool, ReduceOp::Max)(any, t, f, 2);
  gloo_backend::reduce_function(DType::Bool, ReduceOp::Min)(all, t, f, 2);
  EXPECT_TRUE(any[0]);
  EXPECT_FALSE(any[1]);
  EXPECT_FALSE(all[0]);
  EXPECT_EQ(error_of([] { gloo_backend::reduce_function(DType::Bool, ReduceOp::Sum); }),
            "gloo: bool tensors can only be reduced with max (logical or) or min (logical and), not sum");
  EXPECT_NE(error_of([] {
              gloo_backend::reduce_function(DType::Float32, ReduceOp::Avg);
            }).find("gloo: ReduceOp avg reached the backend"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::distributed::testing

#endif  // KILN_WITH_GLOO
