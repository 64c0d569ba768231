// The CUDA runtime around the kernels: streams and events, the caching
// allocator on a real device, asynchronous copies from pinned memory, and
// NVML. Tests that need a GPU skip without one; the ones that check what a
// machine without a GPU or driver answers always run.
#include <gtest/gtest.h>

#include <thread>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/nvml.h"
#include "tensor/cuda/stream.h"
#endif

namespace kiln {

using namespace kiln::ops;
namespace {

#ifndef KILN_WITH_CUDA

TEST(CudaRuntimeWithoutCuda, TensorCudaThrowsNamingTheBuild) {
  expect_error([] { iota_tensor({4}).cuda(); }, "KILN_CUDA=OFF");
}

#else  // KILN_WITH_CUDA

#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"

// Every element of `t` (any device) as float, on the host.
std::vector<float> values_of(const Tensor& t) {
  Tensor host = t.cpu().to(DType::Float32).contiguous();
  return std::vector<float>(host.data<float>(), host.data<float>() + host.numel());
}

// ---- without a GPU or driver: answers, not crashes ------------------------------

TEST(CudaRuntime, GpuStatusIsNulloptWithoutADeviceNotAnError) {
  EXPECT_FALSE(cuda::gpu_status(-1).has_value());
  EXPECT_FALSE(cuda::gpu_status(cuda::device_count()).has_value());  // one past the last
  if (!cuda::cuda_available()) {
    EXPECT_FALSE(cuda::gpu_status(0).has_value());
  }
}

TEST(CudaRuntime, WithoutAGpuStreamsAndStatisticsThrowSayingSo) {
  if (cuda::cuda_available()) GTEST_SKIP() << "this machine has a GPU; the no-GPU messages cannot be seen";
  expect_error([] { cuda::Stream::create(cuda_device(0)); }, "Stream::create: cannot use cuda:0");
  expect_error([] { cuda::memory_stats(cuda_device(0)); }, "memory_stats: cannot use cuda:0");
  expect_error([] { iota_tensor({4}).cuda(); }, "no CUDA device is available");
  // The current stream is bookkeeping only: it answers without a device.
  EXPECT_TRUE(cuda::current_stream(cuda_device(0)).is_default());
  expect_error([] { cuda::current_stream(kCPU); }, "current_stream: expected a CUDA device, got cpu");
}

// ---- streams and events ------------------------------------------------------------

TEST(CudaRuntime, StreamGuardMakesAStreamCurrentForItsThreadOnly) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  EXPECT_EQ(cuda::current_stream(dev), cuda::default_stream(dev));
  EXPECT_EQ(cuda::current_raw_stream(dev), nullptr);
  cuda::Stream side = cuda::Stream::create(dev);
  EXPECT_FALSE(side.is_default());
  EXPECT_EQ(side.device(), dev);
  {
    cuda::StreamGuard guard(side);
    EXPECT_EQ(cuda::current_stream(dev), side);
    EXPECT_EQ(cuda::current_raw_stream(dev), side.handle());
    bool other_thread_default = false;
    std::thread([&] { other_thread_default = cuda::current_stream(dev).is_default(); }).join();
    EXPECT_TRUE(other_thread_default);
  }
  EXPECT_TRUE(cuda::current_stream(dev).is_default());
  cuda::Stream high = cuda::Stream::create(dev, -1);
  EXPECT_NE(high, side);
}

TEST(CudaRuntime, EventsOrderWorkBetweenStreams) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  const int64_t n = int64_t{1} << 22;
  Tensor x = full({n}, 3.5f, {DType::Float32, dev});  // on the default stream
  cuda::Event ready;
  EXPECT_TRUE(ready.query());  // never recorded: nothing to wait for
  ready.record(cuda::current_stream(dev));
  cuda::Stream side = cuda::Stream::create(dev);
  ready.block(side);
  Tensor y = Tensor::empty({n}, {DType::Float64, dev});
  cuda::Event done;
  {
    cuda::StreamGuard guard(side);
    y.copy_(x);  // a converting kernel on `side`, after the fill
    cuda::record_stream(x, side);
    done.record(side);
  }
  done.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_TRUE(side.query());
  for (float v : values_of(y)) ASSERT_EQ(v, 3.5f);
}

TEST(CudaRuntime, ElapsedTimeNeedsTimingEventsBothRecorded) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Event start(/*enable_timing=*/true), end(/*enable_timing=*/true);
  expect_error([&] { (void)start.elapsed_time(end); }, "Event::elapsed_time: both events must be recorded first");
  start.record(cuda::current_stream(dev));
  Tensor big = full({int64_t{1} << 24}, 1.0f, {DType::Float32, dev});
  end.record(cuda::current_stream(dev));
  EXPECT_GE(start.elapsed_time(end), 0.0f);
  cuda::Event plain;
  plain.record(cuda::current_stream(dev));
  expect_error([&] { (void)plain.elapsed_time(end); }, "both events must be created with enable_timing = true");
  cuda::synchronize(dev);
}

// ---- the caching allocator on the device ------------------------------------------

TEST(CudaRuntime, FreedMemoryIsCachedAndReusedWithoutCudaMalloc) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::synchronize(dev);
  const cuda::MemoryStats before = cuda::memory_stats(dev);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({int64_t{1} << 20}, {DType::Float32, dev});  // 4 MiB
    first = t.data_ptr();
    const cuda::MemoryStats during = cuda::memory_stats(dev);
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + (size_t{4} << 20));
    EXPECT_EQ(during.requested_bytes, before.requested_bytes + (size_t{4} << 20));
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
    EXPECT_GE(during.reserved_bytes, during.allocated_bytes);
  }
  const cuda::MemoryStats after = cuda::memory_stats(dev);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  Tensor again = Tensor::empty({int64_t{1} << 20}, {DType::Float32, dev});
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(cuda::memory_stats(dev).cuda_malloc_calls, after.cuda_malloc_calls);
  cuda::reset_peak_memory_stats(dev);
  EXPECT_EQ(cuda::memory_stats(dev).peak_allocated_bytes, cuda::memory_stats(dev).allocated_bytes);
}

TEST(CudaRuntime, EmptyCacheGivesUnusedSegmentsBack) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  { Tensor t = Tensor::empty({int64_t{64} << 20}, {DType::UInt8, dev}); }
  const cuda::MemoryStats cached = cuda::memory_stats(dev);
  EXPECT_GE(cached.reserved_bytes, size_t{64} << 20);
  cuda::empty_cache();
  const cuda::MemoryStats emptied = cuda::memory_stats(dev);
  EXPECT_LE(emptied.reserved_bytes + (size_t{64} << 20), cached.reserved_bytes);
  EXPECT_GT(emptied.cuda_free_calls, cached.cuda_free_calls);
}

TEST(CudaRuntime, BlocksAreReusedOnlyOnTheStreamThatFreedThem) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Stream side = cuda::Stream::create(dev);
  void* on_side = nullptr;
  {
    cuda::StreamGuard guard(side);
    Tensor t = Tensor::empty({12345}, {DType::Float32, dev});
    on_side = t.data_ptr();
  }
  Tensor on_default = Tensor::empty({12345}, {DType::Float32, dev});
  EXPECT_NE(on_default.data_ptr(), on_side);
  cuda::StreamGuard guard(side);
  Tensor again = Tensor::empty({12345}, {DType::Float32, dev});
  EXPECT_EQ(again.data_ptr(), on_side);
}

TEST(CudaRuntime, RecordStreamChecksItsArguments) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Stream side = cuda::Stream::create(dev);
  expect_error([&] { cuda::record_stream(iota_tensor({4}), side); },
               "record_stream: the storage is on cpu but the stream belongs to cuda:0");
  Tensor t = zeros({4}, dev);
  cuda::record_stream(t, side);
  t = Tensor();
  cuda::synchronize(dev);
  Tensor next = zeros({4}, dev);  // processes the finished event
  EXPECT_EQ(cuda::memory_stats(dev).pending_event_blocks, 0);
}

TEST(CudaRuntime, OutOfMemoryReportsTheRequestAndTheStatistics) {
  SKIP_WITHOUT_GPU();
  const int64_t huge = int64_t{1} << 50;  // 1 PiB
  try {
    Tensor::empty({huge}, {DType::UInt8, cuda_device(0)});
    ADD_FAILURE() << "1 PiB allocated";
  } catch (const Error& e) {
    for (const char* part : {"CUDA allocator: out of memory on cuda:0: tried to allocate 1125899906842624 bytes",
                             " reserved in ", " device malloc calls", "; cuda:0 has ", " MiB free of "}) {
      EXPECT_NE(e.message().find(part), std::string::npos) << e.message() << "\nexpected: " << part;
    }
  }
  EXPECT_GE(cuda::memory_stats(cuda_device(0)).ooms, 1);
}

// ---- asynchronous copies from pinned memory -----------------------------------------

// A pinned block freed while its copy is still queued must not be handed
// out again before the copy has read it. The side stream is kept busy with
// large device copies so that the upload runs well after the host moved on.
TEST(CudaRuntime, PinnedBlockFreedDuringAnAsyncCopyIsNotReusedEarly) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  const int64_t n = int64_t{1} << 20;
  cuda::Stream side = cuda::Stream::create(dev);
  Tensor d = Tensor::empty({n}, {DType::Float32, dev});
  {
    cuda::StreamGuard guard(side);
    Tensor a = Tensor::empty({int64_t{256} << 20}, {DType::UInt8, dev});
    Tensor b = Tensor::empty({int64_t{256} << 20}, {DType::UInt8, dev});
    for (int i = 0; i < 20; ++i) b.copy_(a);
    Tensor pinned = full({n}, 2.0f).pin_memory();
    d.copy_(pinned);                             // queued behind the busy work; returns at once
  }                                              // `pinned` is freed here, its copy still pending
  Tensor reused = full({n}, 7.0f).pin_memory();  // same size: the cache's first candidate
  side.synchronize();
  for (float v : values_of(d)) ASSERT_EQ(v, 2.0f);
}

TEST(CudaRuntime, CopiesFollowTheCurrentStream) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Stream side = cuda::Stream::create(dev);
  cuda::StreamGuard guard(side);
  Tensor host = iota_tensor({3, 5}).to(DType::Float32);
  Tensor device = host.cuda();
  EXPECT_EQ(device.device(), dev);
  Tensor strided = Tensor::empty({5, 3}, {DType::Float32, dev}).transpose(0, 1);
  strided.copy_(device);
  EXPECT_EQ(values_of(strided), values_of(host));  // device -> host waits for `side`
}

TEST(CudaRuntime, GpuStatusReportsUtilisationAndMemory) {
  SKIP_WITHOUT_GPU();
  if (!cuda::nvml_available()) GTEST_SKIP() << "NVML (libnvidia-ml.so.1) is not loadable here";
  std::optional<cuda::GpuStatus> status = cuda::gpu_status(0);
  ASSERT_TRUE(status.has_value());
  EXPECT_GT(status->memory_total_bytes, uint64_t{1} << 30);
  EXPECT_LE(status->memory_used_bytes, status->memory_total_bytes);
  EXPECT_GT(status->memory_used_bytes, 0u);  // this process's context at least
  EXPECT_GE(status->utilization_percent, 0);
  EXPECT_LE(status->utilization_percent, 100);
}

#endif  // KILN_WITH_CUDA

}  // namespace
}  // namespace kiln
