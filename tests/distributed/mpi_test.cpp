// The MPI backend under mpirun: world rank and size, each collective on the
// basic dtypes against values computed here, sub-groups, point-to-point
// without deadlock, waits that time out, and the errors a user can hit.
// collectives_test.cpp runs the shared suite on "mpi" as well.
#include "distributed/backends/mpi/process_group_mpi.h"

#include <gtest/gtest.h>

#ifdef KILN_WITH_MPI

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "distributed/multi_process.h"
#include "distributed/store_test_util.h"
#include "tensor/factory.h"

namespace kiln::distributed {
namespace {

using testing::error_of;
using testing::Launcher;
using testing::RankOptions;
using testing::run_on_ranks;

constexpr std::chrono::milliseconds kTimeout = std::chrono::seconds(5);

RankOptions under_mpirun() {
  RankOptions options;
  options.launcher = Launcher::Mpirun;
  options.deadline = std::chrono::seconds(20);
  return options;
}

std::shared_ptr<ProcessGroupMPI> make_world() {
  ProcessGroupOptions options;
  options.timeout = kTimeout;
  return ProcessGroupMPI::create_world(options);
}

Tensor values(const std::vector<double>& v, DType dtype) {
  return from_vector<double>(v, {static_cast<int64_t>(v.size())}).to(dtype);
}

std::vector<double> doubles(const Tensor& t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

// What rank r contributes at element i: small integers, so that every
// dtype holds every sum and product exactly (the product over 3 ranks of
// element 3 is 4 * 5 * 6 = 120, inside int8).
double contribution(int r, int i) { return r + 1 + i; }

std::vector<double> contributions(int r, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(contribution(r, i));
  return v;
}

TEST(MpiWorld, RankAndSizeComeFromMpirun) {
  run_on_ranks(3, [](int rank) {
    auto world = make_world();
    EXPECT_EQ(world->rank(), rank);
    EXPECT_EQ(world->rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
    EXPECT_EQ(world->size(), 3);
    EXPECT_EQ(ProcessGroupMPI::world_size(), 3);
    EXPECT_EQ(world->backend_name(), "mpi");
    EXPECT_EQ(world->collective_device(), kCPU);
    // The store create_world made: every rank reaches rank 0's server.
    ASSERT_NE(world->store(), nullptr);
    world->store()->set("hello/" + std::to_string(rank), "from " + std::to_string(rank));
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(world->store()->get_string("hello/" + std::to_string(r)), "from " + std::to_string(r));
    }
    // A second world group is a separate communicator that works alongside.
    auto second = make_world();
    Tensor a = full({2}, 1.0);
    Tensor b = full({2}, double(rank));
    auto wa = world->all_reduce(a);
    auto wb = second->all_reduce(b, ReduceOp::Max);
    wa->wait();
    wb->wait();
    EXPECT_EQ(doubles(a), (std::vector<double>{3, 3}));
    EXPECT_EQ(doubles(b), (std::vector<double>{2, 2}));
    EXPECT_EQ(error_of([&] { world->check_device(cuda_device(0), "all_reduce"); }),
              "mpi: all_reduce got a tensor on cuda:0; CUDA tensors are not supported by this build's MPI "
              "backend; use nccl, or move the tensor to the CPU");
  }, under_mpirun());
}

class MpiCollectives : public ::testing::TestWithParam<int> {};

TEST_P(MpiCollectives, EachCollectiveOnTheBasicDtypes) {
  const int world_size = GetParam();
  run_on_ranks(world_size, [world_size](int rank) {
    auto world = make_world();
    const int n = 4;
    for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64,
                        DType::Int32, DType::Int8, DType::UInt8}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)));
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
        SCOPED_TRACE(reduce_op_name(op));
        std::vector<double> expected = contributions(0, n);
        for (int r = 1; r < world_size; ++r) {
          for (int i = 0; i < n; ++i) {
            const double x = contribution(r, i);
            double& e = expected[i];
            e = op == ReduceOp::Sum ? e + x : op == ReduceOp::Product ? e * x : op == ReduceOp::Max ? std::max(e, x)
                                                                                                   : std::min(e, x);
          }
        }
        Tensor t = values(contributions(rank, n), dtype);
        world->all_reduce(t, op)->wait();
        EXPECT_EQ(doubles(t), expected);

        // reduce: only the root (the last rank) receives.
        Tensor u = values(contributions(rank, n), dtype);
        world->reduce(u, world_size - 1, op)->wait();
        EXPECT_EQ(doubles(u), rank == world_size - 1 ? expected : contributions(rank, n));
      }

      // broadcast from rank 1
      Tensor b = values(contributions(rank, n), dtype);
      world->broadcast(b, 1)->wait();
      EXPECT_EQ(doubles(b), contributions(1, n));

      // all_gather_into_tensor, all_gather, gather to rank 0: rank r's values in chunk r
      std::vector<double> all;
      for (int r = 0; r < world_size; ++r) {
        for (double x : contributions(r, n)) all.push_back(x);
      }
      Tensor gathered = values(std::vector<double>(world_size * n, 0.0), dtype);
      world->all_gather_into_tensor(gathered, values(contributions(rank, n), dtype))->wait();
      EXPECT_EQ(doubles(gathered), all);
      std::vector<Tensor> outputs;
      for (int r = 0; r < world_size; ++r) outputs.push_back(zeros({n}, dtype));
      world->all_gather(outputs, values(contributions(rank, n), dtype))->wait();
      for (int r = 0; r < world_size; ++r) EXPECT_EQ(doubles(outputs[r]), contributions(r, n));
      std::vector<Tensor> at_root;
      if (rank == 0) {
        for (int r = 0; r < world_size; ++r) at_root.push_back(zeros({n}, dtype));
      }
      world->gather(at_root, values(contributions(rank, n), dtype), 0)->wait();
      for (size_t r = 0; r < at_root.size(); ++r) EXPECT_EQ(doubles(at_root[r]), contributions(int(r), n));

      // reduce_scatter_tensor: rank r's input chunk c holds contribution(r, c); rank c gets the sum.
      std::vector<double> chunks;
      for (int c = 0; c < world_size; ++c) {
        for (int i = 0; i < n; ++i) chunks.push_back(contribution(rank, c));
      }
      Tensor mine = zeros({n}, dtype);
      world->reduce_scatter_tensor(mine, values(chunks, dtype))->wait();
      double sum = 0;
      for (int r = 0; r < world_size; ++r) sum += contribution(r, rank);
      EXPECT_EQ(doubles(mine), std::vector<double>(n, sum));

      // scatter from the last rank: rank r receives the root's chunk r, 10 * r + i.
      std::vector<Tensor> pieces;
      if (rank == world_size - 1) {
        for (int r = 0; r < world_size; ++r) pieces.push_back(values({10.0 * r, 10.0 * r + 1}, dtype));
      }
      Tensor piece = zeros({2}, dtype);
      world->scatter(piece, pieces, world_size - 1)->wait();
      EXPECT_EQ(doubles(piece), (std::vector<double>{10.0 * rank, 10.0 * rank + 1}));

      // all_to_all: rank r sends 10 * r + d to rank d.
      std::vector<Tensor> to_send, received;
      for (int d = 0; d < world_size; ++d) {
        to_send.push_back(values({10.0 * rank + d}, dtype));
        received.push_back(zeros({1}, dtype));
      }
      world->all_to_all(received, to_send)->wait();
      for (int s = 0; s < world_size; ++s) EXPECT_EQ(doubles(received[s]), (std::vector<double>{10.0 * s + rank}));
    }

    // bool reduces logically: v[i] = (rank == i) or i == 4.
    std::vector<double> flags(5, 0.0);
    if (rank < 4) flags[rank] = 1;
    flags[4] = 1;
    Tensor any = values(flags, DType::Bool);
    Tensor every = values(flags, DType::Bool);
    world->all_reduce(any, ReduceOp::Max)->wait();
    world->all_reduce(every, ReduceOp::Min)->wait();
    std::vector<double> expected_any(5, 0.0);
    for (int i = 0; i < 5; ++i) expected_any[i] = i < world_size || i == 4;
    EXPECT_EQ(doubles(any), expected_any);
    EXPECT_EQ(doubles(every), (std::vector<double>{0, 0, 0, 0, 1}));

    // avg: the front-end sums through MPI and divides.
    Tensor mean = full({3}, double(rank + 1), DType::Float32);
    world->all_reduce(mean, ReduceOp::Avg)->wait();
    EXPECT_EQ(doubles(mean), std::vector<double>(3, (world_size + 1) / 2.0));

    world->barrier()->wait();
    EXPECT_EQ(world->sequence_number(), 8u * 15 + 4);  // create_world's own barrier is not one
  }, under_mpirun());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MpiCollectives, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(MpiSubgroup, MembersReduceTogetherAndOthersGetNull) {
  run_on_ranks(3, [](int rank) {
    auto world = make_world();
    ProcessGroupOptions options;
    options.timeout = kTimeout;
    auto outer = world->new_subgroup({0, 2}, options);
    auto middle = world->new_subgroup({1}, options);
    if (rank == 1) {
      EXPECT_EQ(outer, nullptr);
      ASSERT_NE(middle, nullptr);
      EXPECT_EQ(middle->size(), 1);
      EXPECT_EQ(middle->global_rank(0), 1);
      Tensor alone = full({2}, 7.0);
      middle->all_reduce(alone)->wait();
      EXPECT_EQ(doubles(alone), (std::vector<double>{7, 7}));
    } else {
      EXPECT_EQ(middle, nullptr);
      ASSERT_NE(outer, nullptr);
      EXPECT_EQ(outer->backend_name(), "mpi");
      EXPECT_EQ(outer->size(), 2);
      EXPECT_EQ(outer->rank(), rank == 0 ? 0 : 1);
      EXPECT_EQ(outer->global_rank(1), 2);
      Tensor t = full({3}, double(rank + 1));
      outer->all_reduce(t)->wait();
      EXPECT_EQ(doubles(t), std::vector<double>(3, 1 + 3));
      Tensor b = full({1}, double(rank));
      outer->broadcast(b, 1)->wait();  // sub-group rank 1 is world rank 2
      EXPECT_EQ(doubles(b), (std::vector<double>{2}));
    }
    // The world still runs its own collectives after the split.
    Tensor t = full({1}, 1.0);
    world->all_reduce(t)->wait();
    EXPECT_EQ(doubles(t), (std::vector<double>{3}));
  }, under_mpirun());
}

TEST(MpiPointToPoint, RingOfSendsThenRecvsDoesNotDeadlock) {
  run_on_ranks(3, [](int rank) {
    auto world = make_world();
    const int next = (rank + 1) % 3;
    const int previous = (rank + 2) % 3;
    // 4 MB: far above MPI's eager limit, so each send completes only once
    // the peer's recv is posted. Every rank queues its send first.
    const int64_t n = 1 << 20;
    Tensor out = full({n}, double(rank), DType::Float32);
    Tensor in = zeros({n}, DType::Float32);
    auto sent = world->isend(out, next, 3);
    auto received = world->irecv(in, previous, 3);
    sent->wait();
    received->wait();
    EXPECT_EQ(in.at<float>({0}), float(previous));
    EXPECT_EQ(in.at<float>({n - 1}), float(previous));
    // Two messages with one tag arrive in the order they were sent.
    world->isend(full({1}, 10.0, DType::Int64), next, 0);
    world->isend(full({1}, 20.0, DType::Int64), next, 0);
    Tensor first = zeros({1}, DType::Int64);
    Tensor second = zeros({1}, DType::Int64);
    world->recv(first, previous, 0);
    world->recv(second, previous, 0);
    EXPECT_EQ(first.at<int64_t>({0}), 10);
    EXPECT_EQ(second.at<int64_t>({0}), 20);
  }, under_mpirun());
}

TEST(MpiPointToPoint, RecvOfTheWrongSizeFails) {
  run_on_ranks(2, [](int rank) {
    // One group per failure: a failed operation leaves its group unusable.
    auto shorter = make_world();
    auto longer = make_world();
    if (rank == 0) {
      shorter->send(full({3}, 1.0), 1, 5);
      longer->send(full({5}, 1.0), 1, 6);
      return;
    }
    Tensor t = zeros({4});
    EXPECT_NE(error_of([&] { shorter->recv(t, 0, 5); })
                  .find("mpi: recv from rank 0 (tag 5) on rank 1: expected 4 float32 elements but rank 0 sent 3"),
              std::string::npos);
    const std::string truncated = error_of([&] { longer->recv(t, 0, 6); });
    EXPECT_NE(truncated.find("mpi: recv from rank 0 (tag 6) (group 'default', rank 1) failed on world rank 1: "
                             "MPI_ERR_TRUNCATE: message truncated"),
              std::string::npos)
        << truncated;
  }, under_mpirun());
}

TEST(MpiTimeout, AWaitTimesOutWhileAPeerIsLateAndTheCollectiveFinishesLater) {
  run_on_ranks(2, [](int rank) {
    auto world = make_world();
    Tensor t = full({4}, double(rank + 1));
    if (rank == 0) {
      auto work = world->all_reduce(t);
      const auto start = std::chrono::steady_clock::now();
      EXPECT_FALSE(work->wait_for(std::chrono::milliseconds(200)));
      EXPECT_GE(testing::seconds_since(start), 0.19);
      EXPECT_FALSE(work->is_completed());
      world->store()->set("late/go", "1");
      work->wait();
    } else {
      world->store()->get("late/go");  // rank 0 has given up waiting once
      world->all_reduce(t)->wait();
    }
    EXPECT_EQ(doubles(t), std::vector<double>(4, 3));
  }, under_mpirun());
}

TEST(MpiWithoutMpirun, AWorldOfOneAndAClearErrorForALargerOne) {
  // Exec launcher: the rank process is started without mpirun, so MPI
  // initialises as a singleton.
  run_on_ranks(1, [](int) {
    EXPECT_EQ(ProcessGroupMPI::world_size(), 1);
    EXPECT_EQ(error_of([] { ProcessGroupMPI::create_world({}, nullptr, 2); }),
              "mpi: world_size 2 was asked for, but MPI_COMM_WORLD has 1 process (the program was not started "
              "by mpirun, so MPI runs it alone); start it with `mpirun -np 2 ...`, or leave world_size at -1 to "
              "take MPI's");
    auto world = make_world();
    EXPECT_EQ(world->rank(), 0);
    EXPECT_EQ(world->size(), 1);
    Tensor t = full({2}, 5.0, DType::Float16);
    world->all_reduce(t)->wait();
    EXPECT_EQ(doubles(t), (std::vector<double>{5, 5}));
  });
}

}  // namespace
}  // namespace kiln::distributed

#endif  // KILN_WITH_MPI
