#include "tensor/cuda/graph.h"

#include <cuda_runtime.h>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/error.h"

namespace kiln::cuda {

// What holds a capture together while it runs: the capture counted as
// running (the allocators put off what a capture forbids), the capture
// stream made current for the capturing thread, and that thread's
// allocations routed to the graph's pool.
struct Graph::Capture {
  explicit Capture(const std::shared_ptr<GraphMemoryPool>& pool, const Stream& stream)
      : pool_scope(pool, stream), stream_guard(stream) {}
  CaptureUnderway underway;
  GraphMemoryPoolScope pool_scope;
  StreamGuard stream_guard;
};

Graph::Graph() = default;

Graph::~Graph() { reset(); }

void Graph::capture_begin(const Stream& stream) {
  KILN_CHECK(capture_ == nullptr, "cuda::Graph::capture_begin: this graph is already capturing");
  KILN_CHECK(exec_ == nullptr,
             "cuda::Graph::capture_begin: this graph already holds a capture; reset() it before capturing again");
  KILN_CHECK(!stream.is_default(), "cuda::Graph::capture_begin: the default stream of ", stream.device(),
             " cannot be captured; capture on a stream from cuda::Stream::create (Note [CUDA graphs])");
  DeviceGuard device(stream.device(), "cuda::Graph::capture_begin");
  KILN_CHECK(!stream_capturing(stream.handle()), "cuda::Graph::capture_begin: the stream on ", stream.device(),
             " is already being captured");
  // Before anything is queued or waited for: a device synchronization
  // while another capture runs would invalidate that capture.
  KILN_CHECK(!capture_underway(), "cuda::Graph::capture_begin: another CUDA graph capture is underway in this "
             "process; Kiln captures one graph at a time (Note [CUDA graphs])");
  // As torch.cuda.graph: the work queued so far finishes first (its errors
  // are reported here, not blamed on the capture), and the shared cache
  // goes back to the driver, as the capture cannot free memory for its pool.
  synchronize_device(stream.device());
  empty_cache();
  if (pool_ == nullptr) pool_ = make_graph_memory_pool(stream.device());
  auto capture = std::make_unique<Capture>(pool_, stream);
  KILN_CUDA_CHECK(cudaStreamBeginCapture(stream.handle(), cudaStreamCaptureModeGlobal));
  stream_ = stream;
  capture_ = std::move(capture);
}

void Graph::capture_end() {
  KILN_CHECK(capture_ != nullptr, "cuda::Graph::capture_end: no capture_begin before it");
  DeviceGuard device(stream_->device(), "cuda::Graph::capture_end");
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_->handle(), &graph);
  capture_.reset();  // the thread's stream and allocator are its own again
  if (ended != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    KILN_FAIL("cuda::Graph::capture_end: the capture on ", stream_->device(), " failed (", cudaGetErrorName(ended),
              ": ", cudaGetErrorString(ended),
              "): an operation that a capture cannot record ran while it was capturing, such as a synchronization "
              "with the host (Tensor::item(), a copy to the host, Stream::synchronize) on any thread; nothing was "
              "captured (Note [CUDA graphs] in tensor/cuda/graph.h)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  if (instantiated != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    KILN_CUDA_CHECK(instantiated);
  }
  graph_ = graph;
  exec_ = exec;
}

void Graph::replay() {
  KILN_CHECK(exec_ != nullptr, "cuda::Graph::replay: nothing captured yet",
             capture_ ? " (the capture has not ended: call capture_end first)" : "");
  DeviceGuard device(stream_->device(), "cuda::Graph::replay");
  KILN_CUDA_CHECK(cudaGraphLaunch(exec_, current_raw_stream(stream_->device())));
}

void Graph::abandon_capture() noexcept {
  if (capture_ == nullptr) return;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_->handle(), &graph) == cudaSuccess && graph != nullptr) {
    (void)cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();
  capture_.reset();
}

void Graph::reset() {
  abandon_capture();
  if (exec_ != nullptr && cudaGraphExecDestroy(exec_) != cudaSuccess) (void)cudaGetLastError();
  if (graph_ != nullptr && cudaGraphDestroy(graph_) != cudaSuccess) (void)cudaGetLastError();
  exec_ = nullptr;
  graph_ = nullptr;
}

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

bool CudaBackend::capturing(Device device) const {
  return stream_capturing(current_raw_stream(device));
}

MemoryStats Graph::pool_stats() const { return pool_ ? graph_memory_pool_stats(*pool_) : MemoryStats{}; }

}  // namespace kiln::cuda
