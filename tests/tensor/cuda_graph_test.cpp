// CUDA graphs (Note [CUDA graphs] in tensor/cuda/graph.h): a captured piece
// of work replays on new values of its static inputs, its temporaries live
// in the graph's private pool, and what a capture cannot record fails with
// a kiln::Error that leaves the graph able to capture again. A whole
// training step is captured in tests/optim/cuda_graph_training_test.cpp.
// Tests that need a GPU skip without one.
#include <gtest/gtest.h>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/graph.h"
#include "tensor/cuda/stream.h"

namespace kiln {

using namespace kiln::ops;
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"

TEST(CudaGraph, WithoutAGpuCaptureCannotStart) {
  if (cuda::cuda_available()) GTEST_SKIP() << "this machine has a GPU; the no-GPU message cannot be seen";
  expect_error([] { cuda::Stream::create(cuda_device(0)); }, "Stream::create: cannot use cuda:0");
  cuda::Graph graph;
  EXPECT_FALSE(graph.has_graph());
  expect_error([&] { graph.replay(); }, "cuda::Graph::replay: nothing captured yet");
}

// y = x * 2 + 1 with temporaries; the capture runs nothing, replays do, and
// each replay reads x's values of that moment.
TEST(CudaGraph, AReplayRecomputesFromTheStaticInputsValues) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Stream side = cuda::Stream::create(dev);
  Tensor x = arange(0, 1000, 1, {DType::Float32, dev});
  Tensor y = zeros({1000}, {DType::Float32, dev});
  cuda::synchronize(dev);
  cuda::Graph graph;
  graph.capture_begin(side);
  EXPECT_EQ(cuda::current_stream(dev), side);
  y.copy_(add(mul(x, 2.0), 1.0));
  graph.capture_end();
  EXPECT_TRUE(cuda::current_stream(dev).is_default());
  EXPECT_TRUE(graph.has_graph());
  EXPECT_EQ(sum(y).cpu().item<double>(), 0.0);  // captured, not run

  for (double shift : {0.0, 5.0, -3.5}) {
    Tensor values = add(arange(0, 1000, 1, DType::Float32), shift);
    // No waits: the copy, the replay and the read queue in that order on
    // the default stream, the calling thread's current one.
    x.copy_(values.to(dev));
    graph.replay();
    EXPECT_TRUE(allclose(y.cpu(), add(mul(values, 2.0), 1.0), 0, 0)) << "shift " << shift;
  }
}

TEST(CudaGraph, TheCapturesTemporariesComeFromItsPrivatePool) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Stream side = cuda::Stream::create(dev);
  Tensor x = ones({1 << 20}, {DType::Float32, dev});
  cuda::synchronize(dev);
  const size_t shared_before = cuda::memory_stats(dev).allocated_bytes;
  cuda::Graph graph;
  graph.capture_begin(side);
  Tensor out = mul(add(x, 1.0), 3.0);  // a 4 MiB temporary and a 4 MiB output
  graph.capture_end();
  EXPECT_EQ(cuda::memory_stats(dev).allocated_bytes, shared_before);
  const cuda::MemoryStats pool = graph.pool_stats();
  EXPECT_GE(pool.allocated_bytes, size_t{4} << 20);  // `out`, still held
  EXPECT_GE(pool.peak_allocated_bytes, size_t{8} << 20);
  EXPECT_GE(pool.cuda_malloc_calls, 1);
  graph.replay();  // on the default stream: the reads below come after it
  EXPECT_EQ(sum(out).cpu().item<double>(), 6.0 * (1 << 20));
  // Tensors made after the capture, on any stream, come from the shared cache.
  Tensor later = ones({1 << 20}, {DType::Float32, dev});
  EXPECT_GT(cuda::memory_stats(dev).allocated_bytes, shared_before);
}

// What a DataLoader thread does beside a capture: frees memory that another
// stream used (a pinned batch after its asynchronous upload, a device block
// after record_stream) and pins a new batch. The allocators must not record,
// query or wait for events then (CUDA refuses it and the capture breaks):
// they put it off until the capture ends (Note [Caching allocator]).
TEST(CudaGraph, FreesOfMemoryOtherStreamsUsedWaitForTheCaptureToEnd) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Stream side = cuda::Stream::create(dev), other = cuda::Stream::create(dev);
  Tensor batch = full({1 << 16}, 2.0).pin_memory();
  Tensor uploaded = batch.to(dev);  // asynchronous: the pinned block is recorded as used
  Tensor shared = full({1 << 16}, 3.0, {DType::Float32, dev});
  cuda::record_stream(shared, other);
  Tensor x = full({16}, 2.0, {DType::Float32, dev});
  cuda::synchronize(dev);

  cuda::Graph graph;
  graph.capture_begin(side);
  Tensor y = mul(x, x);
  batch = Tensor();   // the pinned block: deferred, no event
  shared = Tensor();  // the device block: deferred, no event
  EXPECT_EQ(cuda::memory_stats(dev).pending_event_blocks, 1);
  Tensor next_batch = full({1 << 16}, 5.0).pin_memory();  // no event query
  ASSERT_NO_THROW(graph.capture_end());

  graph.replay();  // on the default stream: the reads below come after it
  EXPECT_EQ(sum(y).cpu().item<double>(), 64.0);
  EXPECT_EQ(sum(uploaded).cpu().item<double>(), 2.0 * (1 << 16));
  EXPECT_EQ(sum(next_batch.to(dev)).cpu().item<double>(), 5.0 * (1 << 16));
  // After the capture the deferred block gets its event, and once that has
  // completed the block comes back.
  Tensor after = ones({16}, {DType::Float32, dev});  // records the event
  cuda::synchronize(dev);
  Tensor later = ones({16}, {DType::Float32, dev});  // finds it completed
  EXPECT_EQ(cuda::memory_stats(dev).pending_event_blocks, 0);
}

TEST(CudaGraph, AHostSynchronizationInsideACaptureFailsAndTheGraphCanCaptureAgain) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Stream side = cuda::Stream::create(dev);
  Tensor x = full({16}, 2.0, {DType::Float32, dev});
  cuda::synchronize(dev);
  cuda::Graph graph;
  graph.capture_begin(side);
  Tensor y = mul(x, x);
  EXPECT_THROW(y.cpu(), Error);  // a copy to the host cannot be captured
  expect_error([&] { graph.capture_end(); }, "cuda::Graph::capture_end: the capture on cuda:0 failed");
  EXPECT_FALSE(graph.has_graph());
  EXPECT_TRUE(cuda::current_stream(dev).is_default());

  graph.capture_begin(side);
  Tensor z = mul(x, x);
  graph.capture_end();
  graph.replay();  // on the default stream: the reads below come after it
  EXPECT_EQ(sum(z).cpu().item<double>(), 64.0);
}

TEST(CudaGraph, MisuseIsRefusedWithAMessage) {
  SKIP_WITHOUT_GPU();
  const Device dev = cuda_device(0);
  cuda::Graph graph;
  expect_error([&] { graph.capture_begin(cuda::default_stream(dev)); },
               "the default stream of cuda:0 cannot be captured");
  expect_error([&] { graph.capture_end(); }, "cuda::Graph::capture_end: no capture_begin before it");
  cuda::Stream side = cuda::Stream::create(dev);
  graph.capture_begin(side);
  cuda::Stream another = cuda::Stream::create(dev);
  while (another == side) another = cuda::Stream::create(dev);  // the pool hands streams out round robin
  cuda::Graph other;
  // Refused before it waits for the device, which would break the running capture.
  expect_error([&] { other.capture_begin(another); }, "another CUDA graph capture is underway in this process");
  graph.capture_end();
  expect_error([&] { graph.capture_begin(side); }, "already holds a capture; reset() it");
  graph.reset();
  EXPECT_FALSE(graph.has_graph());
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
