// The NCCL backend on the GPUs this machine has. With one GPU: a world of
// one rank, where every collective must give what a single process computes
// on the CPU (the out-of-place ones write outputs that start as zeros, so
// they fail if NCCL moves nothing), CPU tensors are refused, sub-groups and
// init_process_group("nccl", "file://...") work, and a rendezvous whose
// peer never comes fails within its timeout instead of hanging. With two
// GPUs: two ranks, one GPU each, every collective against values computed
// here. Without a GPU, or in a build without NCCL, the tests skip and say why.
#include <gtest/gtest.h>

#ifdef KILN_WITH_NCCL

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/ddp/training_helpers.h"
#include "distributed/file_store.h"
#include "distributed/init.h"
#include "multi_process.h"
#include "store_test_util.h"
#include "training_test_util.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/graph.h"
#include "tensor/cuda/stream.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace kiln::distributed::testing {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kTimeout = std::chrono::seconds(30);

const std::vector<DType> kAllDTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                       DType::Int32,   DType::Int64,   DType::Int8,    DType::UInt8};
const std::vector<DType> kFloatDTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

#define SKIP_WITHOUT_GPU()       \
  if (cuda::device_count() == 0) \
  GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0): the nccl backend needs a GPU"

// ---- values -----------------------------------------------------------------------------

// Rank r's element i of chunk c: 1, 2 or 3, so that sums and products over
// two ranks are exact in every dtype.
double contribution(int rank, int64_t i, int chunk = 0) { return 1 + (rank + chunk + i) % 3; }

std::vector<double> contributions(int rank, int64_t n, int chunk = 0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(contribution(rank, i, chunk));
  return v;
}

std::vector<double> reduced(int size, int64_t n, ReduceOp op, int chunk = 0) {
  std::vector<double> v = contributions(0, n, chunk);
  for (int r = 1; r < size; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double x = contribution(r, i, chunk);
      double& e = v[static_cast<size_t>(i)];
      switch (op) {
        case ReduceOp::Sum: e += x; break;
        case ReduceOp::Avg: e += x; break;
        case ReduceOp::Product: e *= x; break;
        case ReduceOp::Max: e = std::max(e, x); break;
        case ReduceOp::Min: e = std::min(e, x); break;
      }
    }
  }
  if (op == ReduceOp::Avg) {
    for (double& e : v) e /= size;
  }
  return v;
}

// A tensor holding `values` as `dtype` on `device`.
Tensor make(const std::vector<double>& values, DType dtype, Device device) {
  return from_vector<double>(values, {static_cast<int64_t>(values.size())}).to(dtype).to(device);
}

// Read back on the CPU, after the current stream (which wait() ordered after NCCL).
std::vector<double> values_of(const Tensor& t) {
  Tensor d = t.cpu().to(DType::Float64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

Tensor zeros_on(int64_t n, DType dtype, Device device) { return zeros({n}, TensorOptions(dtype, device)); }

// ---- one rank on one GPU -----------------------------------------------------------------

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    store_ = std::make_shared<FileStore>(dir_.path() + "/store", 1, kTimeout);
    ProcessGroupOptions options;
    options.timeout = kTimeout;
    group_ = make_process_group("nccl", store_, 1, 0, options);
    device_ = cuda_device(0);
  }

  TempDir dir_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<ProcessGroup> group_;
  Device device_;
};

TEST_F(NcclOneRank, IsTheNcclBackendOnTheCurrentDevice) {
  EXPECT_EQ(group_->backend_name(), "nccl");
  EXPECT_EQ(group_->rank(), 0);
  EXPECT_EQ(group_->size(), 1);
  const std::vector<std::string> backends = available_backends();
  EXPECT_NE(std::find(backends.begin(), backends.end(), "nccl"), backends.end());
  group_->check_device(device_, "all_reduce");
}

TEST_F(NcclOneRank, AllReduceEveryOpAndDTypeGivesTheSingleRankResult) {
  const int64_t n = 7;
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
      Tensor t = make(contributions(0, n), dtype, device_);
      WorkPtr work = group_->all_reduce(t, op);
      work->wait();
      EXPECT_TRUE(work->is_completed());
      EXPECT_EQ(values_of(t), reduced(1, n, op)) << dtype_name(dtype) << " " << reduce_op_name(op);
    }
  }
  // avg is NCCL's own (supports_avg): over one rank, the values themselves.
  for (DType dtype : kFloatDTypes) {
    Tensor t = make(contributions(0, n), dtype, device_);
    group_->all_reduce(t, ReduceOp::Avg)->wait();
    EXPECT_EQ(values_of(t), reduced(1, n, ReduceOp::Avg)) << "avg " << dtype_name(dtype);
  }
  // bool moves as uint8: max is logical or, min logical and.
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    Tensor flags = make({0, 1, 1, 0}, DType::Bool, device_);
    group_->all_reduce(flags, op)->wait();
    EXPECT_EQ(values_of(flags), (std::vector<double>{0, 1, 1, 0})) << "bool " << reduce_op_name(op);
  }
  // A transposed (non-contiguous) tensor goes through the front-end's copy.
  Tensor base = from_vector<double>(contributions(0, 12), {3, 4}).to(DType::Float32).to(device_);
  group_->all_reduce(base.t())->wait();
  EXPECT_EQ(values_of(base), contributions(0, 12));
}

TEST_F(NcclOneRank, OutOfPlaceCollectivesFillOutputsThatStartAsZeros) {
  const int64_t n = 6;
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor input = make(contributions(0, n), dtype, device_);
    const std::vector<double> expected = contributions(0, n);

    std::vector<Tensor> gathered = {zeros_on(n, dtype, device_)};
    group_->all_gather(gathered, input)->wait();
    EXPECT_EQ(values_of(gathered[0]), expected) << "all_gather";

    Tensor flat = zeros_on(n, dtype, device_);
    group_->all_gather_into_tensor(flat, input)->wait();
    EXPECT_EQ(values_of(flat), expected) << "all_gather_into_tensor";

    Tensor scattered = zeros_on(n, dtype, device_);
    group_->reduce_scatter(scattered, {input})->wait();
    EXPECT_EQ(values_of(scattered), expected) << "reduce_scatter";

    Tensor scattered_flat = zeros_on(n, dtype, device_);
    group_->reduce_scatter_tensor(scattered_flat, input, ReduceOp::Max)->wait();
    EXPECT_EQ(values_of(scattered_flat), expected) << "reduce_scatter_tensor";

    std::vector<Tensor> at_root = {zeros_on(n, dtype, device_)};
    group_->gather(at_root, input, 0)->wait();
    EXPECT_EQ(values_of(at_root[0]), expected) << "gather";

    Tensor from_root = zeros_on(n, dtype, device_);
    group_->scatter(from_root, {input}, 0)->wait();
    EXPECT_EQ(values_of(from_root), expected) << "scatter";

    std::vector<Tensor> exchanged = {zeros_on(n, dtype, device_)};
    group_->all_to_all(exchanged, {input})->wait();
    EXPECT_EQ(values_of(exchanged[0]), expected) << "all_to_all";

    Tensor same = make(expected, dtype, device_);
    group_->broadcast(same, 0)->wait();
    EXPECT_EQ(values_of(same), expected) << "broadcast";
    group_->reduce(same, 0, ReduceOp::Sum)->wait();
    EXPECT_EQ(values_of(same), expected) << "reduce";
  }
  WorkPtr barrier = group_->barrier();
  barrier->wait();
  EXPECT_TRUE(barrier->is_completed());
  EXPECT_EQ(barrier->exception(), nullptr);
}

TEST_F(NcclOneRank, InputsWrittenOnASideStreamAreReadAfterThem) {
  // Note [NCCL streams]: the NCCL stream waits for the caller's current
  // stream, here a pool stream, where the input is filled just before.
  cuda::Stream side = cuda::Stream::create(device_);
  cuda::StreamGuard guard(side);
  const int64_t n = 1 << 20;
  Tensor input = full({n}, 3.0, TensorOptions(DType::Float32, device_));
  Tensor output = zeros_on(n, DType::Float32, device_);
  group_->all_gather_into_tensor(output, input)->wait();
  const std::vector<double> got = values_of(output);
  EXPECT_EQ(std::count(got.begin(), got.end(), 3.0), n);
}

TEST_F(NcclOneRank, RefusesCpuTensorsNamingTheGlooBackend) {
  Tensor cpu = ones({4}, DType::Float32);
  const std::string error = error_of([&] { group_->all_reduce(cpu); });
  EXPECT_EQ(error.rfind("nccl: all_reduce: CPU tensors cannot be used with the nccl backend", 0), 0u) << error;
  EXPECT_NE(error.find("use the gloo backend for CPU tensors"), std::string::npos) << error;
  EXPECT_NE(error_of([&] { group_->broadcast(cpu, 0); }).find("nccl: broadcast: CPU tensors"), std::string::npos);
  // Nothing was issued, so the group is still usable.
  Tensor t = make({1, 2}, DType::Float32, device_);
  group_->all_reduce(t)->wait();
  EXPECT_EQ(values_of(t), (std::vector<double>{1, 2}));
}

TEST_F(NcclOneRank, ACollectiveInsideACudaGraphCaptureIsRefused) {
  cuda::Stream side = cuda::Stream::create(device_);
  Tensor t = make({1, 2}, DType::Float32, device_);
  cuda::synchronize(device_);
  cuda::Graph graph;
  graph.capture_begin(side);
  const std::string error = error_of([&] { group_->all_reduce(t); });
  graph.capture_end();  // nothing reached the NCCL stream: the capture is intact
  EXPECT_NE(error.find("nccl: all_reduce on rank 0 of group '"), std::string::npos) << error;
  EXPECT_NE(error.find("is capturing a CUDA graph; collectives cannot be captured"), std::string::npos) << error;
  group_->all_reduce(t)->wait();  // and the group still works
  EXPECT_EQ(values_of(t), (std::vector<double>{1, 2}));
}

// DDP's own exchanges (the parameter check at construction, the flags of
// find_unused_parameters) and the training helpers carry small tensors
// between ranks; on NCCL, which moves CUDA memory only, they must travel on
// the group's GPU (ProcessGroup::collective_device). A world of one rank
// averages over itself: DDP's gradients are the plain model's.
TEST_F(NcclOneRank, DistributedDataParallelAndTheTrainingHelpersRunOnTheGpu) {
  EXPECT_EQ(group_->collective_device(), device_);
  auto model = std::make_shared<Branchy>(TensorOptions(DType::Float32, device_));
  const Tensor x = from_vector<double>({1, -2, 3, 0.5, -1, 2, 0.25, 4}, {2, 4}).to(DType::Float32).to(device_);
  // kiln::sum and kiln::mul, which record history (not the tensor-level ops::).
  kiln::sum(kiln::mul(model->forward(x), model->forward(x))).backward();
  std::map<std::string, std::vector<double>> plain;
  for (const auto& [name, p] : model->named_parameters()) {
    plain[name] = values_of(p.grad());
    p.set_grad(Tensor());
  }

  DDPOptions options;
  options.group = group_;
  options.find_unused_parameters = true;
  auto ddp = std::make_shared<DistributedDataParallel>(model, options);
  Tensor y = ddp->forward(x);
  kiln::sum(kiln::mul(y, y)).backward();
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().device(), device_) << name;
    const std::vector<double> got = values_of(p.grad()), want = plain[name];
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << name;
    p.set_grad(Tensor());
  }
  // A step that skips the second layer leaves its gradients undefined, as in one process.
  model->use_second = false;
  y = ddp->forward(x);
  kiln::sum(y).backward();
  EXPECT_TRUE(model->fc1->named_parameters().at("weight").grad().defined());
  EXPECT_FALSE(model->fc2->named_parameters().at("weight").grad().defined());

  std::vector<double> sums = {1.5, -2};
  all_reduce_sum(sums, *group_);
  EXPECT_EQ(sums, (std::vector<double>{1.5, -2}));
  EXPECT_TRUE(any_rank_wants(true, *group_));
  EXPECT_FALSE(any_rank_wants(false, *group_));
}

TEST_F(NcclOneRank, TensorsOnAnotherGpuAreRefused) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs a second CUDA device";
  Tensor other = ones({4}, TensorOptions(DType::Float32, cuda_device(1)));
  const std::string error = error_of([&] { group_->all_reduce(other); });
  EXPECT_NE(error.find("runs on cuda:0 but got a tensor on cuda:1"), std::string::npos) << error;
}

TEST_F(NcclOneRank, ASubgroupSplitsOffItsOwnCommunicator) {
  ProcessGroupOptions options;
  options.timeout = kTimeout;
  std::shared_ptr<ProcessGroup> sub = group_->new_subgroup({0}, options);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->backend_name(), "nccl");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->name(), "group1");
  const Tensor input = make(contributions(0, 5), DType::Int64, device_);
  Tensor output = zeros_on(5, DType::Int64, device_);
  sub->all_gather_into_tensor(output, input)->wait();
  EXPECT_EQ(values_of(output), contributions(0, 5));
  // The parent still works beside it.
  Tensor t = make({4, 5}, DType::Float64, device_);
  group_->all_reduce(t, ReduceOp::Max)->wait();
  EXPECT_EQ(values_of(t), (std::vector<double>{4, 5}));
}

// ---- creating groups ----------------------------------------------------------------------

TEST(NcclInit, InitProcessGroupWithAFileStore) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  init_process_group("nccl", "file://" + dir.path() + "/store", 1, 0, kTimeout);
  EXPECT_EQ(default_group().backend_name(), "nccl");
  EXPECT_EQ(get_world_size(), 1);
  EXPECT_EQ(get_rank(), 0);
  Tensor t = make({1, 2, 3}, DType::Float32, cuda_device(0));
  distributed::all_reduce(t, ReduceOp::Avg);
  EXPECT_EQ(values_of(t), (std::vector<double>{1, 2, 3}));
  std::vector<Tensor> outputs = {zeros_on(3, DType::Float32, cuda_device(0))};
  distributed::all_gather(outputs, t);
  EXPECT_EQ(values_of(outputs[0]), (std::vector<double>{1, 2, 3}));
  std::shared_ptr<ProcessGroup> sub = new_group({0});
  ASSERT_NE(sub, nullptr);
  distributed::barrier(sub.get());
  distributed::barrier();
  sub.reset();
  destroy_process_group();
  EXPECT_FALSE(is_initialized());
}

TEST(NcclInit, GroupsMadeOneAfterAnotherOnOneStoreAreDistinct) {
  // Note [NCCL rendezvous]: the second group must not take the first one's id.
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path() + "/store", -1, kTimeout);
  ProcessGroupOptions options;
  options.timeout = kTimeout;
  for (int round = 1; round <= 3; ++round) {
    auto group = make_process_group("nccl", store, 1, 0, options);
    Tensor t = make({double(round)}, DType::Int32, cuda_device(0));
    group->all_reduce(t)->wait();
    EXPECT_EQ(values_of(t), (std::vector<double>{double(round)}));
  }
  EXPECT_EQ(store->get_string("nccl/groups"), "3");
}

TEST(NcclInit, RendezvousFailsNamingTheStoreWhenRankZeroNeverPublishes) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path() + "/store", -1, milliseconds(500));
  ProcessGroupOptions options;
  options.timeout = milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 of 2, and rank 0 never comes.
  const std::string error = error_of([&] { make_process_group("nccl", store, 2, 1, options); });
  EXPECT_LT(seconds_since(start), 5.0) << error;
  EXPECT_NE(error.find("nccl: rank 1 of group 'default' (size 2) could not read NCCL's unique id through file store " +
                       dir.path() + "/store within 500 ms"),
            std::string::npos)
      << error;
}

TEST(NcclInit, CreatingTheCommunicatorTimesOutWhenAPeerNeverJoins) {
  SKIP_WITHOUT_GPU();
  // In a process of its own: NCCL's threads are left to the process's exit.
  RankOptions rank_options;
  rank_options.deadline = std::chrono::seconds(60);
  run_on_ranks(
      1,
      [](int) {
        auto store = std::make_shared<FileStore>(test_store_dir() + "/store", -1, milliseconds(2000));
        ProcessGroupOptions options;
        options.timeout = milliseconds(2000);
        const auto start = std::chrono::steady_clock::now();
        // Rank 0 of 2 publishes its id, but rank 1 never joins.
        const std::string error = error_of([&] { make_process_group("nccl", store, 2, 0, options); });
        std::printf("nccl's report of a peer that never joins, after %.2f s:\n%s\n", seconds_since(start),
                    error.c_str());
        EXPECT_LT(seconds_since(start), 20.0) << error;
        EXPECT_NE(error.find("nccl: group 'default' (rank 0 of 2 on cuda:0) could not create its NCCL communicator "
                             "(timeout 2000 ms): ncclCommInitRankConfig was still in progress after 2000 ms"),
                  std::string::npos)
            << error;
      },
      rank_options);
}

// ---- two ranks on two GPUs ----------------------------------------------------------------

TEST(NcclTwoGpus, EveryCollectiveMatchesValuesComputedHere) {
  if (cuda::device_count() < 2) {
    GTEST_SKIP() << "needs two CUDA devices, this machine has " << cuda::device_count();
  }
  run_on_ranks(2, [](int rank) {
    // Each rank drives its own GPU, as LOCAL_RANK picks it under kiln-run.
    cuda::DeviceGuard gpu(cuda_device(rank));
    const Device device = cuda_device(rank);
    auto group = make_test_group("nccl", kTimeout);
    const int size = 2;
    const int64_t n = 5;

    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
        Tensor t = make(contributions(rank, n), dtype, device);
        group->all_reduce(t, op)->wait();
        EXPECT_EQ(values_of(t), reduced(size, n, op)) << dtype_name(dtype) << " " << reduce_op_name(op);
      }
    }
    Tensor average = make(contributions(rank, n), DType::Float32, device);
    group->all_reduce(average, ReduceOp::Avg)->wait();
    EXPECT_EQ(values_of(average), reduced(size, n, ReduceOp::Avg));

    Tensor from_one = make(contributions(rank, n), DType::BFloat16, device);
    group->broadcast(from_one, 1)->wait();
    EXPECT_EQ(values_of(from_one), contributions(1, n));

    Tensor to_zero = make(contributions(rank, n), DType::Int64, device);
    group->reduce(to_zero, 0, ReduceOp::Product)->wait();
    EXPECT_EQ(values_of(to_zero), rank == 0 ? reduced(size, n, ReduceOp::Product) : contributions(rank, n));

    std::vector<Tensor> gathered = {zeros_on(n, DType::Float16, device), zeros_on(n, DType::Float16, device)};
    group->all_gather(gathered, make(contributions(rank, n), DType::Float16, device))->wait();
    for (int r = 0; r < size; ++r) EXPECT_EQ(values_of(gathered[r]), contributions(r, n)) << "all_gather " << r;

    // inputs[c] on rank q is contributions(q, n, c): rank r receives the sum over q of chunk r.
    std::vector<Tensor> chunks;
    for (int c = 0; c < size; ++c) chunks.push_back(make(contributions(rank, n, c), DType::Float64, device));
    Tensor mine = zeros_on(n, DType::Float64, device);
    group->reduce_scatter(mine, chunks)->wait();
    EXPECT_EQ(values_of(mine), reduced(size, n, ReduceOp::Sum, rank));

    std::vector<Tensor> at_one;
    if (rank == 1) at_one = {zeros_on(n, DType::Int8, device), zeros_on(n, DType::Int8, device)};
    group->gather(at_one, make(contributions(rank, n), DType::Int8, device), 1)->wait();
    if (rank == 1) {
      for (int r = 0; r < size; ++r) EXPECT_EQ(values_of(at_one[r]), contributions(r, n)) << "gather " << r;
    }

    std::vector<Tensor> from_zero;
    if (rank == 0) {
      for (int r = 0; r < size; ++r) from_zero.push_back(make(contributions(10, n, r), DType::UInt8, device));
    }
    Tensor part = zeros_on(n, DType::UInt8, device);
    group->scatter(part, from_zero, 0)->wait();
    EXPECT_EQ(values_of(part), contributions(10, n, rank));

    // inputs[c] on rank q is contributions(q, n, c); outputs[q] on rank r is rank q's chunk r.
    std::vector<Tensor> outgoing, incoming;
    for (int c = 0; c < size; ++c) {
      outgoing.push_back(make(contributions(rank, n, c), DType::Int32, device));
      incoming.push_back(zeros_on(n, DType::Int32, device));
    }
    group->all_to_all(incoming, outgoing)->wait();
    for (int q = 0; q < size; ++q) EXPECT_EQ(values_of(incoming[q]), contributions(q, n, rank)) << "all_to_all " << q;

    // Note [NCCL point to point]: one direction at a time.
    Tensor message =
        rank == 0 ? make(contributions(7, n), DType::Float32, device) : zeros_on(n, DType::Float32, device);
    if (rank == 0) group->send(message, 1);
    if (rank == 1) group->recv(message, 0);
    EXPECT_EQ(values_of(message), contributions(7, n));

    group->barrier()->wait();

    ProcessGroupOptions options;
    options.timeout = kTimeout;
    std::shared_ptr<ProcessGroup> second = group->new_subgroup({1}, options);
    EXPECT_EQ(second != nullptr, rank == 1);
    if (second) {
      Tensor alone = make({5, 6}, DType::Float32, device);
      second->all_reduce(alone)->wait();
      EXPECT_EQ(values_of(alone), (std::vector<double>{5, 6}));
    }
    group->barrier()->wait();
  });
}

}  // namespace
}  // namespace kiln::distributed::testing

#else  // KILN_WITH_NCCL

TEST(ProcessGroupNCCL, NeedsABuildWithNccl) {
  GTEST_SKIP() << "this build of Kiln has no NCCL backend: it comes with the CUDA backend (configure with "
                  "-DKILN_CUDA=ON, which needs nvcc and NCCL)";
}

#endif  // KILN_WITH_NCCL
