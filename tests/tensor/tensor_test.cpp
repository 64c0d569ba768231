// Tensor metadata, storage, and the slots later layers rely on.
#include <gtest/gtest.h>

#include <cstdint>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

TEST(Tensor, EmptyIsContiguousAndAligned) {
  Tensor t = Tensor::empty({3, 5}, DType::Float64);
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.strides(), (Shape{5, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 15u * 8u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignment, 0u);
  EXPECT_EQ(t.device(), kCPU);
}

TEST(Tensor, ZeroDimAndZeroSize) {
  Tensor s = full({}, 4.5, DType::Float64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<double>(), 4.5);
  Tensor z = zeros({0, 4});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_TRUE(z.is_contiguous());
  expect_error([&] { z.item<float>(); }, "item: expected a tensor with one element, got shape [0, 4]");
  expect_error([] { Tensor::empty({2, -1}); }, "empty: negative size -1 in shape [2, -1]");
}

TEST(Tensor, UndefinedTensorThrows) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  expect_error([&] { (void)t.shape(); }, "Tensor: the tensor is undefined");
}

TEST(Tensor, TypedAccessChecksDtypeAndBounds) {
  Tensor t = iota_tensor({2, 3});
  expect_error([&] { t.data<float>(); }, "Tensor::data: requested float32 but the tensor is int32");
  EXPECT_EQ(t.at<int64_t>({1, -1}), 5);
  expect_error([&] { t.at<int>({2, 0}); }, "at: index 2 is out of range for dim 0 of size 2");
  expect_error([&] { t.at<int>({1}); }, "at: got 1 indices for a tensor of shape [2, 3]");
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.stride(0), 3);
  expect_error([&] { t.size(2); }, "size: dim 2 is out of range for a tensor of 2 dimensions");
}

TEST(Tensor, VersionCounterIsSharedByViews) {
  Tensor base = zeros({4, 4});
  Tensor view = base.select(0, 1);
  uint64_t v0 = base.version();
  view.copy_(ones({4}));
  EXPECT_EQ(base.version(), v0 + 1);
  EXPECT_EQ(base.at<float>({1, 2}), 1.0f);
  EXPECT_EQ(base.at<float>({0, 2}), 0.0f);
}

TEST(Tensor, SetStorageSwapsMemoryUnderTheSameHandle) {
  // FSDP keeps the parameter handle and swaps its memory between a shard and
  // the gathered full tensor.
  Tensor param = zeros({2, 2});
  Tensor holder = param;  // e.g. a module's reference to the same TensorImpl
  Tensor gathered = from_vector<float>({1, 2, 3, 4}, {2, 2});
  param.impl()->set_storage(gathered.storage(), {2, 2}, {2, 1}, 0);
  EXPECT_EQ(holder.at<float>({1, 0}), 3.0f);
  expect_error([&] { param.impl()->set_storage(gathered.storage(), {3, 2}, {2, 1}, 0); },
               "TensorImpl: a view of size [3, 2], strides [2, 1] and offset 0 reaches element 5 but the storage "
               "holds only 4 elements of float32");
}

TEST(Tensor, AsStridedChecksStorageBounds) {
  Tensor t = iota_tensor({6});
  Tensor w = t.as_strided({2, 2}, {1, 2}, 1);  // [[1, 3], [2, 4]]
  EXPECT_EQ(w.at<int>({1, 1}), 4);
  expect_error([&] { t.as_strided({2, 3}, {3, 1}, 1); }, "reaches element 6 but the storage holds only 6");
}

struct TestAutogradMeta : AutogradMeta {
  int marker = 42;
};

TEST(Tensor, CarriesAutogradAndQuantizationSlots) {
  Tensor t = zeros({3});
  t.impl()->set_autograd_meta(std::make_shared<TestAutogradMeta>());
  EXPECT_EQ(static_cast<TestAutogradMeta*>(t.impl()->autograd_meta().get())->marker, 42);

  Tensor q = zeros({2, 3}, DType::Int8);
  auto params = std::make_shared<QuantParams>();
  params->scheme = QuantParams::Scheme::PerChannel;
  params->scales = {0.1, 0.2};
  params->zero_points = {0, 3};
  params->axis = 0;
  q.impl()->set_quant_params(params);
  EXPECT_EQ(q.impl()->quant_params()->scales[1], 0.2);
}

TEST(Storage, FromBlobRunsDeleterOnce) {
  static int deleted = 0;
  static float buffer[4] = {1, 2, 3, 4};
  {
    auto storage = Storage::from_blob(buffer, sizeof buffer, kCPU, [](void*) { ++deleted; });
    Tensor t(std::make_shared<TensorImpl>(storage, DType::Float32, Shape{2, 2}, Shape{2, 1}, 0));
    Tensor view = t.t();
    EXPECT_EQ(view.at<float>({0, 1}), 3.0f);
  }
  EXPECT_EQ(deleted, 1);
}

TEST(CpuAllocator, ReusesLargeBlocksAndEmptiesCache) {
  cpu_empty_cache();
  EXPECT_EQ(cpu_cached_bytes(), 0u);
  void* first = nullptr;
  {
    Tensor big = Tensor::empty({1 << 20});  // 4 MiB: a large block
    first = big.data_ptr();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % kCpuAlignment, 0u);
  }
  EXPECT_GE(cpu_cached_bytes(), size_t{4} << 20);
  {
    // The same size comes back from the cache, and fill still writes it.
    Tensor again = full({1 << 20}, 3.0f);
    EXPECT_EQ(again.data_ptr(), first);
    EXPECT_EQ(again.at<float>({(1 << 20) - 1}), 3.0f);
    EXPECT_EQ(cpu_cached_bytes(), 0u);
  }
  cpu_empty_cache();
  EXPECT_EQ(cpu_cached_bytes(), 0u);
  // Small blocks are never cached.
  { Tensor small = Tensor::empty({16}); }
  EXPECT_EQ(cpu_cached_bytes(), 0u);
}

TEST(Tensor, DevicesWithoutBackendFailClearly) {
#ifndef KILN_WITH_CUDA
  expect_error([] { zeros({2}, cuda_device(0)); }, "Kiln was built without");
#else
  GTEST_SKIP() << "built with CUDA: tests/tensor/cuda_test.cpp covers CUDA tensors";
#endif
}

}  // namespace
}  // namespace kiln
