// CUDA streams and events: the queues that device work goes to.
//
// Note [Current stream]
// Every kernel, copy and library call of the CUDA backend is queued on the
// calling thread's current stream for the tensor's device, which starts as
// that device's default stream. Code that wants to overlap work (a
// communication stream beside compute, a prefetching copy) takes a Stream
// from Stream::create and makes it current for a scope with a StreamGuard;
// ordering between streams is then expressed with Events.
// - The current stream is kept per host thread and per device
//   (thread_local), as the CUDA runtime keeps the current device.
// - The default stream is the legacy default stream (handle 0), as in
//   PyTorch, not cudaStreamPerThread. The legacy stream waits for all
//   blocking streams of its device and they wait for it, so code that never
//   names a stream (every thread's, and libraries given stream 0) runs in
//   one order, and a tensor freed by one thread is safe to hand to another
//   (Note [Caching allocator] in tensor/caching_allocator.h reuses memory
//   per stream). Per-thread default streams would let threads overlap, but
//   would make every tensor passed between threads a cross-stream hazard.
// - Streams from Stream::create are non-blocking: they do not wait for the
//   default stream, which is what makes overlap possible, and why work
//   handed between them needs an Event (event.record(a); event.block(b)).
//   They come from a small per-device pool that is created once and never
//   destroyed (as PyTorch's): a Stream is then a plain value that may be
//   copied and kept anywhere, and a stream handle that the caching allocator
//   remembers can never be reused for a different stream.
//
// This header does not include the CUDA runtime: cudaStream_t and
// cudaEvent_t are declared exactly as cuda_runtime.h declares them, so plain
// C++ can hold them.
#pragma once

#include "tensor/cuda_status.h"
#include "tensor/device.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct CUevent_st;
typedef struct CUevent_st* cudaEvent_t;

namespace kiln::cuda {

// A queue of work on one CUDA device.
//   cuda::Stream side = cuda::Stream::create(cuda_device(0));
//   { cuda::StreamGuard guard(side); y = x * 2; }  // queued on `side`
class Stream {
 public:
  // The device's default stream.
  explicit Stream(Device device);

  // One of the device's pool streams (Note [Current stream]), taken round
  // robin. `priority` 0 is normal; a negative one asks for the device's
  // highest priority (work on it is scheduled first). Throws kiln::Error when
  // `device` is not a usable CUDA device.
  static Stream create(Device device, int priority = 0);

  Device device() const { return device_; }
  cudaStream_t handle() const { return handle_; }
  bool is_default() const { return handle_ == nullptr; }

  // True when all work queued so far has finished; never blocks.
  bool query() const;
  // Blocks the host until all work queued so far has finished, then throws
  // the first error a kernel on this stream recorded since the last wait
  // (Note [CUDA kernel errors] in kernel_errors.h).
  void synchronize() const;

  bool operator==(const Stream& other) const = default;

 private:
  Stream(Device device, cudaStream_t handle) : device_(device), handle_(handle) {}
  friend Stream current_stream(Device device);

  Device device_;
  cudaStream_t handle_ = nullptr;
};

// The device's default stream (the legacy default stream, handle 0).
Stream default_stream(Device device);
// The calling thread's current stream on `device`.
Stream current_stream(Device device);
// Makes `stream` the calling thread's current stream on its device.
void set_current_stream(const Stream& stream);

// The calling thread's current stream on `device` (a CUDA device), as the
// runtime handle that kernel launches and library calls take. Cheap: called
// for every launch, by code that already checked the device.
cudaStream_t current_raw_stream(Device device);

// Makes a stream current on its device for a scope and restores the one
// that was current before.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// A marker in a stream's queue: done once the work queued before it is.
//   cuda::Event ready;
//   ready.record(copy_stream);               // after the copy was queued
//   ready.block(cuda::current_stream(dev));  // compute waits for the copy
// The CUDA event is created on first record, on the stream's device; an
// event that was never recorded counts as done.
class Event {
 public:
  // `enable_timing` lets elapsed_time() measure between two events; without
  // it, recording and waiting are cheaper.
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the work queued on `stream` so far (again, if recorded before).
  // Throws kiln::Error when the event belongs to another device.
  void record(const Stream& stream);
  // Makes work queued on `stream` from now on wait until this event is
  // done, without blocking the host (cudaStreamWaitEvent).
  void block(const Stream& stream) const;
  // True when the marked work has finished; never blocks.
  bool query() const;
  // Blocks the host until the marked work has finished.
  void synchronize() const;
  // Milliseconds from this event to `end`, waiting for `end` to complete.
  // Both must be recorded, on one device, and created with enable_timing.
  float elapsed_time(const Event& end) const;

  bool is_recorded() const { return event_ != nullptr; }
  Device device() const { return device_; }
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  Device device_ = kCPU;  // set by the first record
  bool timing_;
};

// cuda::synchronize(device) (tensor/cuda_status.h, in every build), when
// libkiln_cuda is loaded: waits for all work on `device`, on every stream,
// then throws the first error a kernel recorded since the last wait (Note
// [CUDA kernel errors] in kernel_errors.h).
void synchronize_device(Device device);

}  // namespace kiln::cuda
