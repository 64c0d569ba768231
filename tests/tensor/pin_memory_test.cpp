// Tensor::pin_memory and is_pinned (Note [Pinned memory] in tensor/allocator.h):
// checked everywhere with a counting host allocator standing in for the CUDA
// one, and, on a machine with a GPU, with real page-locked memory copied to
// the device and back.
#include <gtest/gtest.h>

#include <vector>

#include "tensor/cuda_status.h"
#include "tensor/ops.h"
#include "tests/tensor/pinned_test_allocator.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include <cuda_runtime.h>

#include "tensor/cuda/device.h"
#include "tensor/cuda/pinned_allocator.h"
#endif

namespace kiln {

using namespace kiln::ops;
namespace {

TEST(PinMemory, CopiesIntoThePinnedAllocator) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  ASSERT_TRUE(pinned_allocator_available());
  Tensor x = from_vector<float>({1.5f, -2.0f, 3.25f, 4.0f, 5.0f, -6.5f}, {2, 3});
  {
    Tensor p = x.pin_memory();
    EXPECT_EQ(pinned.allocations.load(), 1);
    EXPECT_EQ(pinned.live_bytes.load(), 6 * 4);
    EXPECT_TRUE(p.is_pinned());
    EXPECT_TRUE(p.device().is_cpu());
    EXPECT_NE(p.data_ptr(), x.data_ptr());
    EXPECT_EQ(p.shape(), (Shape{2, 3}));
    EXPECT_EQ(p.dtype(), DType::Float32);
    const float expected[] = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f, -6.5f};
    for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(p.data<float>()[k], expected[k]) << "element " << k;
    // The copy is independent of the source.
    x.data<float>()[0] = 100.0f;
    EXPECT_EQ(p.data<float>()[0], 1.5f);
  }
  EXPECT_EQ(pinned.deallocations.load(), 1);
  EXPECT_EQ(pinned.live_bytes.load(), 0);
}

TEST(PinMemory, NonContiguousInputBecomesAContiguousCopyWithTheSameValues) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  // t: (4, 3) int32, the transpose of iota (3, 4): t[i][j] = 4 j + i.
  Tensor t = iota_tensor({3, 4}).t();
  ASSERT_FALSE(t.is_contiguous());
  Tensor p = t.pin_memory();
  EXPECT_TRUE(p.is_contiguous());
  EXPECT_EQ(p.shape(), (Shape{4, 3}));
  EXPECT_EQ(p.dtype(), DType::Int32);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(p.at<int32_t>({i, j}), 4 * j + i) << i << ", " << j;
  }

  // A stepped slice of float64 with a storage offset: rows 1 and 3 of (5, 2).
  Tensor d = arange(10, DType::Float64).reshape({5, 2}).slice(0, 1, 5, 2);
  Tensor pd = d.pin_memory();
  EXPECT_EQ(pd.shape(), (Shape{2, 2}));
  EXPECT_EQ(pd.dtype(), DType::Float64);
  EXPECT_EQ(pd.storage_offset(), 0);
  const double expected[] = {2, 3, 6, 7};
  for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(pd.data<double>()[k], expected[k]) << "element " << k;

  // A broadcast (stride 0) view is materialized: (3, 2) from (1, 2).
  Tensor b = from_vector<int64_t>({7, -9}, {1, 2}).expand({3, 2});
  Tensor pb = b.pin_memory();
  EXPECT_EQ(pb.strides(), (Shape{2, 1}));
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(pb.at<int64_t>({i, 0}), 7);
    EXPECT_EQ(pb.at<int64_t>({i, 1}), -9);
  }
  EXPECT_EQ(pinned.allocations.load(), 3);
}

TEST(PinMemory, IsPinnedOnlyForPinnedStoragesAndTheirViews) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  Tensor ordinary = iota_tensor({2, 3});
  EXPECT_FALSE(ordinary.is_pinned());
  EXPECT_FALSE(ordinary.t().is_pinned());
  std::vector<float> outside(4, 1.0f);
  Tensor blob(std::make_shared<TensorImpl>(Storage::from_blob(outside.data(), 16, kCPU), DType::Float32,
                                           Shape{4}, Shape{1}, 0));
  EXPECT_FALSE(blob.is_pinned());

  Tensor p = ordinary.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.storage()->is_pinned());
  // Views share the storage, so they are pinned too; copies are not.
  EXPECT_TRUE(p.select(0, 1).is_pinned());
  EXPECT_TRUE(p.t().is_pinned());
  EXPECT_FALSE(p.clone().is_pinned());
  EXPECT_FALSE(ordinary.is_pinned());
}

TEST(PinMemory, PinningAPinnedTensorReturnsItWithoutCopying) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  Tensor p = iota_tensor({3, 4}).pin_memory();
  Tensor again = p.pin_memory();
  EXPECT_TRUE(again.is_same(p));
  EXPECT_EQ(again.storage(), p.storage());
  // A non-contiguous view of pinned memory is pinned already, as in PyTorch.
  Tensor view = p.t();
  Tensor view_again = view.pin_memory();
  EXPECT_TRUE(view_again.is_same(view));
  EXPECT_EQ(view_again.strides(), (Shape{1, 4}));
  EXPECT_EQ(pinned.allocations.load(), 1);
}

TEST(PinMemory, EmptyTensorsPin) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  Tensor p = Tensor::empty({0, 3}).pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_EQ(p.shape(), (Shape{0, 3}));
}

TEST(PinMemory, MemoryGoesBackToTheAllocatorItCameFrom) {
  CountingHostAllocator first;
  CountingHostAllocator second;
  PinnedAllocatorScope scope(&first);
  Tensor p = iota_tensor({8}).pin_memory();
  EXPECT_EQ(set_pinned_allocator(&second), &first);
  EXPECT_TRUE(p.is_pinned());
  p = Tensor();
  EXPECT_EQ(first.deallocations.load(), 1);
  EXPECT_EQ(second.deallocations.load(), 0);
  EXPECT_EQ(set_pinned_allocator(&first), &second);
}

TEST(PinMemory, KeepsQuantizationParameters) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  Tensor q = from_vector<int8_t>({1, -2, 3}, {3});
  auto params = std::make_shared<QuantParams>();
  params->scales = {0.5};
  params->zero_points = {1};
  q.impl()->set_quant_params(params);
  Tensor p = q.pin_memory();
  ASSERT_NE(p.impl()->quant_params(), nullptr);
  EXPECT_EQ(p.impl()->quant_params()->scales[0], 0.5);
  EXPECT_EQ(p.impl()->quant_params()->zero_points[0], 1);
}

TEST(PinMemory, GradientFlowsBackThroughThePinnedCopy) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  Tensor x = from_vector<float>({1, 2, 3}, {3});
  x.requires_grad_();
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.requires_grad());
  EXPECT_FALSE(p.is_leaf());
  p.backward(from_vector<float>({0.5f, -1.0f, 2.0f}, {3}));
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().at<float>({0}), 0.5f);
  EXPECT_EQ(x.grad().at<float>({1}), -1.0f);
  EXPECT_EQ(x.grad().at<float>({2}), 2.0f);
}

TEST(PinMemory, WithoutAPinnedAllocatorThrowsAsPyTorchDoes) {
  PinnedAllocatorScope scope(nullptr);
  EXPECT_FALSE(pinned_allocator_available());
  Tensor x = iota_tensor({2, 2});
  expect_error([&] { x.pin_memory(); }, "pin_memory: no CUDA device is available to page-lock host memory (");
  // Why there is no GPU: no CUDA backend, or what the driver said.
  expect_error([&] { x.pin_memory(); }, "(" + cuda::unavailable_reason() + ")");
  expect_error([] { pinned_allocator("my_op"); }, "my_op: no CUDA device is available to page-lock host memory");
  expect_error([] { Storage::allocate_pinned(16); }, "Storage::allocate_pinned: no CUDA device");
  // An already pinned tensor needs no allocator.
  CountingHostAllocator pinned;
  Tensor p;
  {
    PinnedAllocatorScope inner(&pinned);
    p = x.pin_memory();
  }
  EXPECT_TRUE(p.pin_memory().is_same(p));
}

TEST(PinMemory, OnlyCpuTensorsCanBePinned) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  expect_error([] { tensor_claiming_device(cuda_device(0), 4).pin_memory(); },
               "pin_memory: only CPU tensors can be pinned; this one is on cuda:0");
  expect_error([] { Tensor().pin_memory(); }, "undefined");
  EXPECT_EQ(pinned.allocations.load(), 0);
}

#ifndef KILN_WITH_CUDA

TEST(PinMemoryWithoutCuda, NoPinnedAllocatorIsRegistered) {
  EXPECT_FALSE(pinned_allocator_available());
  expect_error([] { iota_tensor({3}).pin_memory(); }, "KILN_CUDA=OFF");
}

#else  // KILN_WITH_CUDA

#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"

TEST(PinMemoryCuda, WithoutAGpuNoPinnedAllocatorIsRegistered) {
  if (cuda::cuda_available()) GTEST_SKIP() << "this machine has a GPU; the no-GPU message cannot be seen";
  EXPECT_FALSE(pinned_allocator_available());
  expect_error([] { iota_tensor({3}).pin_memory(); },
               "pin_memory: no CUDA device is available to page-lock host memory (" + cuda::unavailable_reason());
}

TEST(PinMemoryCuda, PinnedTensorsAreRealPageLockedMemoryAndCopyToTheGpuAndBack) {
  SKIP_WITHOUT_GPU();
  ASSERT_TRUE(pinned_allocator_available());
  EXPECT_EQ(&pinned_allocator(), &cuda::pinned_host_allocator());
  // x: (64, 33) float32, transposed so the pinning copy is strided.
  std::vector<double> values = pseudo_random(64 * 33, -4.0, 4.0, 7);
  Tensor x = from_vector(values, {64, 33}).to(DType::Float32).t();
  Tensor p = x.pin_memory();
  ASSERT_TRUE(p.is_pinned());
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, p.data_ptr()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost) << "the driver does not know the memory as page-locked";

  Tensor on_gpu = p.to(cuda_device(0));
  EXPECT_TRUE(on_gpu.device().is_cuda());
  Tensor back = on_gpu.cpu();
  EXPECT_FALSE(back.is_pinned());
  // Into a pinned destination as well: device -> page-locked host.
  Tensor pinned_back = Tensor::empty({33, 64}).pin_memory();
  pinned_back.copy_(on_gpu);
  for (int64_t i = 0; i < 33; ++i) {
    for (int64_t j = 0; j < 64; ++j) {
      const float expected = static_cast<float>(values[static_cast<size_t>(j * 33 + i)]);
      ASSERT_EQ(back.at<float>({i, j}), expected) << i << ", " << j;
      ASSERT_EQ(pinned_back.at<float>({i, j}), expected) << i << ", " << j;
    }
  }
}

TEST(PinMemoryCuda, FreedBlocksAreCachedBySizeAndEmptyCacheReturnsThem) {
  SKIP_WITHOUT_GPU();
  cuda::pinned_empty_cache();
  EXPECT_EQ(cuda::pinned_cached_bytes(), 0u);
  const size_t in_use = cuda::pinned_allocated_bytes();
  void* first = nullptr;
  {
    Tensor p = Tensor::empty({1000}).pin_memory();  // 4000 bytes: one 4 KiB page
    first = p.data_ptr();
    EXPECT_EQ(cuda::pinned_allocated_bytes(), in_use + 4000);
  }
  EXPECT_EQ(cuda::pinned_cached_bytes(), 4096u);
  EXPECT_EQ(cuda::pinned_allocated_bytes(), in_use);
  {
    // A request that rounds to the same size gets the cached block back.
    Tensor again = Tensor::empty({1020}).pin_memory();
    EXPECT_EQ(again.data_ptr(), first);
    EXPECT_EQ(cuda::pinned_cached_bytes(), 0u);
  }
  cuda::pinned_empty_cache();
  EXPECT_EQ(cuda::pinned_cached_bytes(), 0u);
}

#endif  // KILN_WITH_CUDA

}  // namespace
}  // namespace kiln
