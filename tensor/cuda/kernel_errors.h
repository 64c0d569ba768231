// How CUDA kernels report bad data (an index out of range) so that the host
// throws kiln::Error naming the op and the values, without waiting for the
// GPU at every op that could find some.
//
// Note [CUDA kernel errors]
// Kernels that read indices must reject one outside its range with a
// kiln::Error naming the op and the value, as the CPU kernels do, but a
// kernel cannot throw. Reading a flag back right after each launch would
// make the host wait for the GPU there: a LeNet training step did so five
// times (cross_entropy's target bounds, gather, two max-pool backwards), and
// every wait empties the queue of launches the host had run ahead with.
// So Kiln defers the check, as torch does with its device-side asserts:
// - Before the launch, the op calls watch_kernel_errors(device, stream,
//   message) and passes the ErrorSlot it returns to the kernel. The host
//   keeps `message` (how to word the error) under the launch's id, a number
//   that counts up per stream and is never reused.
// - A thread that finds a bad value skips its element and calls
//   slot.record(values...). The first one on the stream sets a flag in the
//   stream's error buffer (atomicCAS) and writes which launch it was and up
//   to three values; later ones find the flag set and write nothing.
// - Whenever the host waits for the stream anyway (a copy to the host, such
//   as item() or cpu(); Stream::synchronize(); cuda::synchronize()) it calls
//   check_kernel_errors, which reads the buffer (five words) and, if a
//   kernel recorded something, throws that launch's message, saying it was
//   found by a kernel queued earlier.
// - The host keeps the messages of the last kMaxWatchedLaunches launches
//   only; after that many launches with no wait the next watch waits and
//   checks by itself, so a loop that never reads a value back still has
//   every message it may need.
// Costs and consequences. A watched launch costs a kept message on the host
// and nothing on the device unless something is wrong. The error surfaces
// at the next wait, not in the op that found it: the op's results are
// garbage (the bad elements were skipped), and anything computed from them
// before the wait too, but the message still names the op and the value.
// The messages and the buffer are per stream, so a wait on one stream never
// reports, or waits for, another stream's launches. Threads that share a
// stream (every thread that never picks one shares the default stream)
// share its errors: the first thread to wait throws one, worded for the
// launch that found it, whichever thread queued that launch.
// While a stream is being captured into a CUDA graph nothing is watched
// (the slot's buffer is null): a replay's bad index is skipped without an
// error (Note [CUDA graphs] in graph.h).
//   ErrorSlot bad = watch_kernel_errors(device, stream, [](const KernelErrorValues& v) {
//     return str("gather: index ", v[0], " is out of range ...");
//   });
//   kernel<<<..., stream>>>(..., bad);   // device: bad.record(value)
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "tensor/device.h"

namespace kiln::cuda {

// Launches a stream may run ahead with, watched, before a watch waits for it.
inline constexpr size_t kMaxWatchedLaunches = 1024;

// What the failing thread recorded: the values its op's message names.
using KernelErrorValues = std::array<int64_t, 3>;
// Words the message from the values; runs on the host, only after a failure.
using KernelErrorMessage = std::function<std::string(const KernelErrorValues&)>;

// Passed to a kernel by value.
struct ErrorSlot {
  // The stream's error buffer: [0] the flag, [1] the launch, [2..4] the
  // values. Null while the stream is being captured: nothing is recorded.
  unsigned long long* words;
  unsigned long long launch;  // the id of this watched launch of the stream

#ifdef __CUDACC__
  __device__ void record(int64_t a, int64_t b = 0, int64_t c = 0) const {
    if (words == nullptr || atomicCAS(words, 0ull, 1ull) != 0ull) return;
    words[1] = launch;
    words[2] = static_cast<unsigned long long>(a);
    words[3] = static_cast<unsigned long long>(b);
    words[4] = static_cast<unsigned long long>(c);
  }
#endif
};

// Registers a launch about to be queued on `stream` of `device` (the
// current device) and returns the slot its kernel records into. May wait
// for the stream and throw an earlier launch's error (kMaxWatchedLaunches).
ErrorSlot watch_kernel_errors(Device device, cudaStream_t stream, KernelErrorMessage message);

// Throws the first error a watched launch on `stream` recorded since the
// last check, if any, and clears it. Call it only once the host has waited
// for the stream.
void check_kernel_errors(Device device, cudaStream_t stream);

// The same for every stream of `device`, once the host has waited for the
// whole device.
void check_kernel_errors(Device device);

}  // namespace kiln::cuda
