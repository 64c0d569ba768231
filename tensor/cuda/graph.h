// CUDA graphs: record the kernels of a piece of work once, replay them with
// one launch.
//
// Note [CUDA graphs]
// A small model's training step on a GPU is hundreds of kernels of a few
// microseconds each, and the host's time to launch them (a few microseconds
// each, plus Kiln's own bookkeeping per op) is the step's time: the GPU
// waits for the CPU. CUDA can record what is queued on a stream into a graph
// (stream capture) and launch the whole graph again with one call
// (cudaGraphLaunch), replaying every kernel with the same arguments: the
// same pointers, shapes and scalar values. So a replay computes on the
// memory the capture used, and the way to feed it new data is to copy the
// data into the tensors the capture read (a "static input"), and to read the
// results from the tensors it wrote (a "static output"). As PyTorch's
// torch.cuda.CUDAGraph:
//
//   cuda::Stream side = cuda::Stream::create(dev);
//   // Warm up on the side stream first: cuDNN picks its algorithms, cuBLAS
//   // makes its workspace, the allocator caches blocks; none of that may
//   // happen inside a capture.
//   { cuda::StreamGuard g(side); for (int i = 0; i < 3; ++i) step(); }
//   cuda::Graph graph;
//   graph.capture_begin(side);
//   Tensor loss = step();          // forward, backward and optimizer step
//   graph.capture_end();
//   for (...) { static_x.copy_(batch_x); static_y.copy_(batch_y); graph.replay(); }
//
// A replay queues on the calling thread's current stream, as torch's, so it
// is ordered with the copies before it and the reads after it on that
// stream (the default one in the loop above).
//
// What a capture needs, and what Kiln does for it:
// - Memory. Every allocation the capturing thread makes on the capture
//   stream comes from the graph's private pool (GraphMemoryPool in
//   allocator.h): a temporary freed during the capture may be reused later in
//   the same capture (the graph orders them as the stream did), but nothing
//   of the pool goes to other tensors while the graph lives, since replays
//   write to it. The pool's memory goes back to the driver when the graph and
//   every tensor allocated from it are gone.
// - A stream of its own: the legacy default stream cannot be captured.
//   capture_begin makes the stream current for the calling thread until
//   capture_end, so every op of the thread queues there.
// - No synchronization with the host while capturing: Tensor::item(), a copy
//   to the host, Stream::synchronize. CUDA refuses them (the op throws
//   kiln::Error with CUDA's "operation not permitted when stream is
//   capturing"), the capture is then invalid, and capture_end throws; the
//   Graph is left empty and may capture again. Kiln's checks of index
//   values made by kernels (gather, index_select, scatter_add, max-pool
//   backward, integer division; cross_entropy's and nll_loss's class
//   targets; embedding's indices: Note [CUDA kernel errors] in
//   kernel_errors.h) are not watched while capturing: a replay has no way
//   to report them, so check the data before copying it into the static
//   inputs. The kernels still skip an out-of-range index rather than read
//   outside memory.
// - Static shapes and values: a replay cannot change a shape, and a scalar
//   baked into a kernel's arguments stays (the learning rate of a fused
//   optimizer kernel, for one: a schedule that changes the learning rate
//   needs a new capture).
// Capture mode is CUDA's global mode: an unsafe call from any thread while
// the capture runs invalidates it, which catches a data loader thread
// synchronizing in the middle (the private pool's own cudaMalloc calls are
// exempted, as they are not steps of the graph). For the same reason one
// capture runs at a time in a process: capture_begin waits for the device,
// which would invalidate a capture already running.
#pragma once

#include <memory>
#include <optional>

#include "tensor/cuda/allocator.h"
#include "tensor/cuda/stream.h"

struct CUgraph_st;
struct CUgraphExec_st;

namespace kiln::cuda {

class Graph {
 public:
  Graph();
  // Ends a capture still running (discarding it) and frees the graph.
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Waits for the device's queued work and gives the shared cache back to
  // the driver (as torch.cuda.graph), then starts capturing the calling
  // thread's work on `stream`, which becomes its current stream on that
  // device until capture_end. Throws kiln::Error
  // for a default stream, a stream already capturing, a graph that already
  // holds a capture (reset() it first), or while another capture runs.
  void capture_begin(const Stream& stream);
  // Ends the capture and makes the graph ready to replay. Throws kiln::Error
  // when the capture was invalidated (see the Note), leaving the graph empty.
  // Call on the thread that called capture_begin.
  void capture_end();
  // Queues the captured work on the calling thread's current stream of the
  // graph's device; returns without waiting for it, as any kernel launch.
  void replay();
  // Frees the captured graph (the private pool lives on while tensors
  // allocated from it do).
  void reset();

  bool has_graph() const { return exec_ != nullptr; }
  bool capturing() const { return capture_ != nullptr; }
  // The private pool's statistics (all zero before the first capture).
  MemoryStats pool_stats() const;

 private:
  struct Capture;
  void abandon_capture() noexcept;

  std::unique_ptr<Capture> capture_;  // while capturing
  std::shared_ptr<GraphMemoryPool> pool_;
  std::optional<Stream> stream_;  // the capture's, once capture_begin has run
  CUgraph_st* graph_ = nullptr;
  CUgraphExec_st* exec_ = nullptr;
};

// Whether `stream` is being captured (by a Graph or anyone else).
bool stream_capturing(cudaStream_t stream);

}  // namespace kiln::cuda
