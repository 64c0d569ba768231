// ErrorFlag: how a CUDA kernel reports bad data (an index out of range) so
// that the host can throw kiln::Error naming the values.
//
// Note [CUDA kernel errors]
// Kernels that read indices must reject one outside its range with a
// kiln::Error naming the op and the value, as the CPU kernels do, but a
// kernel cannot throw. It skips the element and records what it found in a
// small device buffer: a flag that the first failing thread sets with
// atomicCAS, then up to three values (the bad index, where it was). The host
// reads the buffer back after the launches and throws. The read waits for
// the kernels: the price of a precise error, as torch pays with its
// device-side asserts.
//   ErrorFlag bad(out.device(), stream);
//   kernel<<<...>>>(..., bad.data());      // device: bad.record(v, i, p)
//   auto found = bad.read();               // host: std::nullopt when all was well
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <optional>

#include "tensor/cuda/check.h"
#include "tensor/cuda/graph.h"
#include "tensor/tensor.h"

namespace kiln::cuda {

// The device side: a pointer to the buffer, passed to kernels by value.
struct ErrorSlot {
  int64_t* words;  // (4): [0] set to 1 by the first failure, [1..3] its values

  __device__ void record(int64_t a, int64_t b = 0, int64_t c = 0) const {
    auto* flag = reinterpret_cast<unsigned long long*>(words);
    if (atomicCAS(flag, 0ull, 1ull) == 0ull) {
      words[1] = a;
      words[2] = b;
      words[3] = c;
    }
  }
};

// The host side: owns the buffer (cleared on construction) on `stream`.
class ErrorFlag {
 public:
  ErrorFlag(Device device, cudaStream_t stream)
      : buffer_(Tensor::empty({4}, {DType::Int64, device})), stream_(stream) {
    KILN_CUDA_CHECK(cudaMemsetAsync(buffer_.data_ptr(), 0, 4 * sizeof(int64_t), stream_));
  }

  ErrorSlot slot() const { return {static_cast<int64_t*>(buffer_.data_ptr())}; }

  // Waits for the stream's work so far; the recorded values, if a kernel
  // recorded any. While the stream is being captured into a CUDA graph there
  // is nothing to wait for and nothing to read: nullopt (Note [CUDA graphs]
  // in graph.h).
  std::optional<std::array<int64_t, 3>> read() const {
    if (stream_capturing(stream_)) return std::nullopt;
    int64_t host[4] = {0, 0, 0, 0};
    KILN_CUDA_CHECK(cudaMemcpyAsync(host, buffer_.data_ptr(), sizeof host, cudaMemcpyDeviceToHost, stream_));
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (host[0] == 0) return std::nullopt;
    return std::array<int64_t, 3>{host[1], host[2], host[3]};
  }

 private:
  Tensor buffer_;
  cudaStream_t stream_;
};

}  // namespace kiln::cuda
