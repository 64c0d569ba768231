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

// Note [Version counter]: one counter for a tensor and all its views.
TEST(Tensor, VersionCounterIsSharedByViews) {
  Tensor base = zeros({4, 4});
  Tensor row = base.select(0, 1);
  Tensor cols = base.slice(1, 1, 3);
  Tensor flipped = base.t();
  Tensor flat = base.view({16});
  Tensor alias = base.detach();
  Tensor corner = flipped.narrow(0, 2, 2).as_strided({2}, {5}, 0);  // a view of a view
  std::vector<Tensor> family = {base, row, cols, flipped, flat, alias, corner};
  uint64_t v0 = base.version();
  for (const Tensor& t : family) EXPECT_EQ(t.version(), v0);
  // A write through any one of them is a write to all of them.
  int64_t writes = 0;
  for (Tensor t : family) {
    add_(t, 1.0);
    ++writes;
    for (const Tensor& u : family) EXPECT_EQ(u.version(), v0 + static_cast<uint64_t>(writes));
  }
  row.copy_(full({4}, 9.0));
  EXPECT_EQ(base.version(), v0 + static_cast<uint64_t>(writes) + 1);
  EXPECT_EQ(base.at<float>({1, 2}), 9.0f);
}

TEST(Tensor, CopiesHaveTheirOwnVersionCounter) {
  Tensor base = zeros({3, 2});
  Tensor cloned = base.clone();
  Tensor packed = base.t().contiguous();  // a copy: the transpose is not contiguous
  Tensor widened = base.to(DType::Float64);
  uint64_t v0 = base.version();
  for (Tensor copy : {cloned, packed, widened}) {
    uint64_t before = copy.version();
    add_(copy, 1.0);
    EXPECT_EQ(copy.version(), before + 1);
    EXPECT_EQ(base.version(), v0);
  }
  uint64_t cloned_version = cloned.version();
  add_(base, 1.0);
  EXPECT_EQ(cloned.version(), cloned_version);
}

// Note [Swapping a tensor's storage]: FSDP keeps the parameter's handle and
// swaps its memory between the gathered full tensor and its 1-d shard.
TEST(Tensor, SetStorageSwapsMemoryUnderTheSameHandle) {
  Tensor param = zeros({2, 3});
  Tensor holder = param;          // a module's reference to the same TensorImpl
  Tensor old_view = param.select(0, 0);
  Tensor gathered = from_vector<float>({9, 1, 2, 3, 4, 5, 6}, {7});  // the full values at offset 1
  for (int i = 0; i < 3; ++i) add_(gathered, 0.0);  // writes that count for the source only
  uint64_t version = param.version();
  ASSERT_NE(gathered.version(), version);  // so that taking the source's count would show

  param.impl()->set_storage(gathered.narrow(0, 1, 6), {2, 3});
  EXPECT_EQ(holder.shape(), (Shape{2, 3}));
  EXPECT_EQ(holder.strides(), (Shape{3, 1}));
  EXPECT_EQ(holder.storage_offset(), 1);
  EXPECT_EQ(holder.at<float>({1, 0}), 4.0f);
  EXPECT_EQ(param.version(), version);  // a swap is not a write, and the source's count is not taken
  EXPECT_EQ(old_view.at<float>({0}), 0.0f);  // views taken earlier keep the old memory...
  add_(old_view, 1.0);                         // ...and the counter
  EXPECT_EQ(param.version(), version + 1);

  // To a 1-d shard of a flat buffer, and back to the full shape.
  Tensor shard = from_vector<float>({7, 8, 9, 10}, {4}).narrow(0, 1, 3);
  param.impl()->set_storage(shard, {3});
  EXPECT_EQ(holder.shape(), (Shape{3}));
  EXPECT_EQ(holder.at<float>({0}), 8.0f);
  mul_(holder, 2.0);  // an in-place write to the parameter as a shard
  EXPECT_EQ(param.version(), version + 2);
  param.impl()->set_storage(gathered.narrow(0, 1, 6), {2, 3});
  EXPECT_EQ(param.version(), version + 2);
  EXPECT_EQ(shard.at<float>({0}), 16.0f);

  // The source's own sizes keep its strides, even when not contiguous.
  Tensor transposed = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}).t();
  param.impl()->set_storage(transposed, {2, 3});
  EXPECT_EQ(param.strides(), (Shape{1, 2}));
  EXPECT_EQ(param.at<float>({1, 0}), 2.0f);

  // The dtype follows the source (FSDP's bfloat16 compute copy), and back.
  Tensor low = from_vector<float>({1, 2, 3, 4, 5, 6}, {6}).to(DType::BFloat16);
  param.impl()->set_storage(low, {2, 3});
  EXPECT_EQ(holder.dtype(), DType::BFloat16);
  EXPECT_EQ(static_cast<float>(holder.at<BFloat16>({1, 2})), 6.0f);
  param.impl()->set_storage(shard, {3});
  EXPECT_EQ(holder.dtype(), DType::Float32);
  EXPECT_EQ(param.version(), version + 2);

  // So does the device (FSDP's host-memory shards gathered on a GPU).
  Tensor on_gpu = tensor_claiming_device(cuda_device(0), 6);
  param.impl()->set_storage(on_gpu, {2, 3});
  EXPECT_EQ(holder.device(), cuda_device(0));
  param.impl()->set_storage(shard, {3});
  EXPECT_EQ(holder.device(), kCPU);
}

TEST(Tensor, SetStorageRefusesAnotherNumelOrLayout) {
  Tensor param = zeros({2, 3});
  const Storage* storage = param.storage().get();
  Tensor six = zeros({6});
  expect_error([&] { param.impl()->set_storage(six, {2, 2}); },
               "set_storage: sizes [2, 2] hold 4 elements but the source [6] holds 6");
  expect_error([&] { param.impl()->set_storage(zeros({5}), {2, 3}); },
               "set_storage: sizes [2, 3] hold 6 elements but the source [5] holds 5");
  expect_error([&] { param.impl()->set_storage(zeros({3, 2}).t(), {6}); },
               "set_storage: sizes [6] differ from the source's [2, 3], which is not contiguous (strides [1, 2])");
  expect_error([&] { param.impl()->set_storage(Tensor(), {2, 3}); },
               "set_storage: the source tensor is undefined");
  // A refused swap leaves the tensor as it was.
  EXPECT_EQ(param.shape(), (Shape{2, 3}));
  EXPECT_EQ(param.storage().get(), storage);
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
