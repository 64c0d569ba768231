// CUDA index_select, gather and scatter_add against the CPU backend: exact
// for every dtype (the ops copy, and scatter_add sums in the CPU's order),
// on contiguous, transposed and sliced operands, and the same errors for an
// index out of range, thrown when the host next waits for the device (Note
// [CUDA kernel errors] in tensor/cuda/kernel_errors.h).
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tensor/cuda/kernel_errors.h"
#include "tensor/cuda/stream.h"
#include "tests/tensor/cuda_test_util.h"

namespace kiln {

using namespace kiln::ops;
using namespace kiln::backend_compare;
namespace {

// An Int64 CPU tensor of `shape` with values in [0, limit) from `seed`.
Tensor random_index(const Shape& shape, int64_t limit, uint64_t seed) {
  std::vector<double> v = pseudo_random(shape_numel(shape), 0, static_cast<double>(limit), seed);
  for (double& x : v) x = std::floor(x);
  return from_vector(v, shape).to(DType::Int64);
}

TEST(CudaIndex, IndexSelectMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kEveryDType) {
    Tensor x = random_tensor({7, 9, 5}, dtype, 1);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor index = random_index({11}, x.size(dim), 10 + dim);
      const std::string what = detail::str("index_select ", dtype, " dim ", dim);
      expect_matches(index_select(x, dim, index), index_select(x.to(gpu()), dim, index.to(gpu())), what, 0);
      // A transposed input and a strided index.
      Tensor xt = x.transpose(0, 2);
      Tensor strided = random_index({22}, xt.size(dim), 20 + dim).slice(0, 0, 22, 2);
      expect_matches(index_select(xt, dim, strided), index_select(x.to(gpu()).transpose(0, 2), dim,
                                                                  strided.contiguous().to(gpu())),
                     what + " transposed", 0);
    }
  }
}

TEST(CudaIndex, GatherMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kEveryDType) {
    Tensor x = random_tensor({6, 8, 5}, dtype, 2);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape shape = {4, 7, 3};
      shape[dim] = 12;  // may exceed x along dim
      Tensor index = random_index(shape, x.size(dim), 30 + dim);
      const std::string what = detail::str("gather ", dtype, " dim ", dim);
      expect_matches(gather(x, dim, index), gather(x.to(gpu()), dim, index.to(gpu())), what, 0);
      Tensor index_t = index.transpose(0, 2).contiguous().transpose(0, 2);  // same values, transposed layout
      expect_matches(gather(x.transpose(1, 2).contiguous().transpose(1, 2), dim, index),
                     gather(x.to(gpu()).transpose(1, 2).contiguous().transpose(1, 2), dim, index_t.to(gpu())),
                     what + " strided", 0);
    }
  }
}

TEST(CudaIndex, ScatterAddMatchesTheCpuExactlyForEveryDtype) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kEveryDType) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor x = random_tensor({5, 6, 4}, dtype, 3);
      Shape shape = {4, 5, 3};
      shape[dim] = 40;  // many collisions per target
      Tensor index = random_index(shape, x.size(dim), 40 + dim);
      Tensor src = random_tensor({shape[0] + 1, shape[1] + 1, shape[2] + 1}, dtype, 5);  // larger than index
      const std::string what = detail::str("scatter_add ", dtype, " dim ", dim);
      // Sums in the CPU's order: exact even for floats.
      expect_matches(scatter_add(x, dim, index, src), scatter_add(x.to(gpu()), dim, index.to(gpu()), src.to(gpu())),
                     what, 0);
      // In place on a transposed view.
      Tensor host = x.clone().transpose(0, 1);
      Tensor dev = x.to(gpu()).transpose(0, 1);
      Tensor index_t = random_index({5, 4, 3}, host.size(dim), 50 + dim);
      Tensor src_t = random_tensor({5, 4, 3}, dtype, 6);
      scatter_add_(host, dim, index_t, src_t);
      scatter_add_(dev, dim, index_t.to(gpu()), src_t.to(gpu()));
      expect_matches(host, dev, what + " transposed in place", 0);
    }
  }
}

TEST(CudaIndex, ScatterAddIsDeterministic) {
  SKIP_WITHOUT_GPU();
  // One target hit 100000 times: float sums in any other order would differ.
  Tensor src = random_tensor({100000}, DType::Float32, 7).to(gpu());
  Tensor index = zeros({100000}, {DType::Int64, gpu()});
  Tensor first = scatter_add(zeros({3}, {DType::Float32, gpu()}), 0, index, src);
  Tensor second = scatter_add(zeros({3}, {DType::Float32, gpu()}), 0, index, src);
  expect_matches(first.cpu(), second, "repeat", 0);
  expect_matches(scatter_add(zeros({3}), 0, index.cpu(), src.cpu()), first, "cpu", 0);
}

TEST(CudaIndex, OutOfRangeIndicesThrowNamingTheOpAndTheValue) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_tensor({5, 3}, DType::Float32, 8).to(gpu());
  Tensor bad = from_vector<int64_t>({0, 7, 1}, {3}).to(gpu());
  // Each op queues its kernel and returns; the copy to the host waits and throws.
  expect_error([&] { index_select(x, 0, bad).cpu(); }, "index_select: index 7 is out of range for dim 0 of size 5");
  Tensor negative = from_vector<int64_t>({-1, 0, 1, 2, 0, 1}, {2, 3}).to(gpu());
  expect_error([&] { gather(x, 1, negative).cpu(); }, "gather: index -1 is out of range for dim 1 of size 3");
  Tensor y = zeros({5, 3}, {DType::Float32, gpu()});
  Tensor big = from_vector<int64_t>({5, 0, 0}, {1, 3}).to(gpu());
  expect_error(
      [&] {
        scatter_add_(y, 0, big, x);
        cuda::synchronize(gpu());
      },
      "scatter_add: index 5 is out of range for dim 0 of size 5");
  // A reported error is forgotten: a good call afterwards succeeds.
  Tensor good = from_vector<int64_t>({4, 0, 1}, {3}).to(gpu());
  expect_matches(index_select(x.cpu(), 0, good.cpu()), index_select(x, 0, good), "after error", 0);
}

TEST(CudaIndex, AnErrorComesAtTheNextWaitNamingTheOpThatFoundIt) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_tensor({5, 3}, DType::Float32, 9).to(gpu());
  Tensor bad = from_vector<int64_t>({2, 9}, {2}).to(gpu());
  Tensor picked = index_select(x, 0, bad);  // no wait, no error yet
  Tensor more = mul(picked, 2.0);           // later work queues behind it
  try {
    (void)sum(more).cpu();
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("index_select: index 9 is out of range for dim 0 of size 5 (found on cuda:0 by a "
                               "kernel queued earlier; reported when the host next waited for the device)"),
              std::string::npos)
        << e.message();
  }
  // Reported once: the next wait is clean.
  EXPECT_NO_THROW(cuda::synchronize(gpu()));
}

TEST(CudaIndex, AWaitOnOneStreamLeavesAnotherStreamsErrorPending) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_tensor({5, 3}, DType::Float32, 10).to(gpu());
  Tensor bad = from_vector<int64_t>({0, 5}, {2}).to(gpu());
  cuda::synchronize(gpu());
  cuda::Stream side = cuda::Stream::create(gpu());
  {
    cuda::StreamGuard on_side(side);
    (void)index_select(x, 0, bad);
  }
  // The default stream's wait knows nothing of the side stream's launch...
  EXPECT_NO_THROW((void)x.cpu());
  // ...the side stream's own wait reports it.
  expect_error([&] { side.synchronize(); }, "index_select: index 5 is out of range for dim 0 of size 5");
}

TEST(CudaIndex, ManyLaunchesWithoutAWaitCheckByThemselves) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_tensor({5, 3}, DType::Float32, 11).to(gpu());
  Tensor bad = from_vector<int64_t>({7}, {1}).to(gpu());
  Tensor good = from_vector<int64_t>({1}, {1}).to(gpu());
  cuda::synchronize(gpu());
  (void)index_select(x, 0, bad);
  // The list of watched launches is bounded: within kMaxWatchedLaunches more
  // watched launches, and with no wait of ours, one of them reports it.
  expect_error(
      [&] {
        for (size_t i = 0; i < cuda::kMaxWatchedLaunches; ++i) (void)index_select(x, 0, good);
      },
      "index_select: index 7 is out of range for dim 0 of size 5");
  EXPECT_NO_THROW(cuda::synchronize(gpu()));
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
