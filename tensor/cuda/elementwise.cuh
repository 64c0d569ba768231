// The launcher shared by the CUDA elementwise kernels (unary, binary, clamp).
//
// Note [Vectorised elementwise kernels]
// An elementwise kernel does almost no arithmetic per byte, so its speed is
// the speed at which it moves memory. GPUs move memory fastest in 16-byte
// transactions per thread, so when the output is contiguous and every input
// is either laid out like it or a single broadcast value (the common case:
// x + y, x * 2), each thread loads and stores whole 16-byte packs: 4 floats,
// 8 halves, 16 bools (V = 16 / the wider of the input and output element).
// Packs need their address aligned to 16 bytes; a view that starts
// mid-pack (x[1:]) and every other layout take the strided kernel (Note
// [Strided kernels]), which handles anything and for a single contiguous run
// costs one multiply per element. The last n % V elements of the packed path
// are done one by one by the first threads of the grid.
//
// Op functors take and return the compute type (float for the 16-bit floats,
// tensor/cuda/dtype.cuh); the kernels do the conversions, so a functor is
// written once for every dtype.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/strided.cuh"

namespace kiln::cuda {

// V elements of T moved as one aligned transaction.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// The compute type of device type T.
template <class T>
using DeviceCompute = decltype(to_compute(std::declval<T>()));

// Elements per pack for input T and output R: 16 bytes of the wider one.
template <class T, class R>
inline constexpr int kPackElements = static_cast<int>(16 / (sizeof(T) > sizeof(R) ? sizeof(T) : sizeof(R)));

// The N input pointers of one kernel; scalar[k]: input k is one value
// broadcast to every element (all strides 0).
template <class T, int N>
struct ElementwiseInputs {
  const T* ptr[N];
  bool scalar[N];
};

template <class F, class C, int N>
__device__ inline auto apply_op(const F& f, const C (&x)[N]) {
  static_assert(N == 1 || N == 2, "elementwise ops take one or two inputs");
  if constexpr (N == 1) {
    return f(x[0]);
  } else {
    return f(x[0], x[1]);
  }
}

// out[i] = f(in[0][i], ...) over contiguous out and inputs (or broadcast
// scalars), V elements per thread and step. out, in: n elements.
template <int V, class R, class T, int N, class F>
__global__ void elementwise_packed_kernel(R* out, ElementwiseInputs<T, N> in, int64_t n, F f) {
  using C = DeviceCompute<T>;
  C scalar[N];
#pragma unroll
  for (int k = 0; k < N; ++k) scalar[k] = in.scalar[k] ? to_compute(in.ptr[k][0]) : C{};
  const int64_t packs = n / V;
  for (int64_t p = global_thread_index(); p < packs; p += grid_stride()) {
    Pack<T, V> x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (!in.scalar[k]) x[k] = reinterpret_cast<const Pack<T, V>*>(in.ptr[k])[p];
    }
    Pack<R, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      C args[N];
#pragma unroll
      for (int k = 0; k < N; ++k) args[k] = in.scalar[k] ? scalar[k] : to_compute(x[k].v[j]);
      o.v[j] = from_compute<R>(apply_op(f, args));
    }
    reinterpret_cast<Pack<R, V>*>(out)[p] = o;
  }
  const int64_t i = packs * V + global_thread_index();
  if (i < n) {
    C args[N];
#pragma unroll
    for (int k = 0; k < N; ++k) args[k] = in.scalar[k] ? scalar[k] : to_compute(in.ptr[k][i]);
    out[i] = from_compute<R>(apply_op(f, args));
  }
}

// The same over any strides; layout operand 0 is out, k + 1 is input k.
template <class R, class T, int N, class F>
__global__ void elementwise_strided_kernel(R* out, ElementwiseInputs<T, N> in, StridedOffsets<N + 1> layout, int64_t n,
                                           F f) {
  using C = DeviceCompute<T>;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[N + 1];
    strided_offsets(layout, i, n, offset);
    C args[N];
#pragma unroll
    for (int k = 0; k < N; ++k) args[k] = to_compute(in.ptr[k][offset[k + 1]]);
    out[offset[0]] = from_compute<R>(apply_op(f, args));
  }
}

// True when every element of t is the one at its data pointer.
inline bool is_broadcast_scalar(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.strides()[d] != 0 && t.shape()[d] != 1) return false;
  }
  return true;
}

inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// out = f(inputs...) elementwise on out's GPU and current stream. R and T
// are device types: out holds R, every input T; inputs have out's shape
// (broadcast dims with stride 0). `op` names the op in errors.
template <class R, class T, int N, class F>
void launch_elementwise(const char* op, const Tensor& out, const std::array<Tensor, N>& inputs, const F& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device(), op);
  cudaStream_t stream = current_raw_stream(out.device());
  constexpr int V = kPackElements<T, R>;
  constexpr size_t pack_bytes = sizeof(Pack<T, V>) > sizeof(Pack<R, V>) ? sizeof(Pack<T, V>) : sizeof(Pack<R, V>);

  ElementwiseInputs<T, N> in;
  bool packed = out.is_contiguous() && is_aligned(out.data_ptr(), sizeof(Pack<R, V>));
  for (int k = 0; k < N; ++k) {
    in.ptr[k] = static_cast<const T*>(inputs[k].data_ptr());
    in.scalar[k] = is_broadcast_scalar(inputs[k]);
    packed = packed && (in.scalar[k] || (inputs[k].is_contiguous() && is_aligned(in.ptr[k], sizeof(Pack<T, V>))));
  }
  static_assert(pack_bytes <= 16);
  if (packed) {
    // At least one block, whose first threads do the tail.
    elementwise_packed_kernel<V, R, T, N, F><<<grid_for(std::max<int64_t>(n / V, 1)), kThreadsPerBlock, 0, stream>>>(
        static_cast<R*>(out.data_ptr()), in, n, f);
    KILN_CUDA_CHECK_LAUNCH("elementwise_packed_kernel");
    return;
  }
  std::array<Tensor, N + 1> operands;
  operands[0] = out;
  for (int k = 0; k < N; ++k) operands[k + 1] = inputs[k];
  for_each_strided_launch<N + 1>(
      operands, [&](const std::array<Tensor, N + 1>& part, const StridedOffsets<N + 1>& layout) {
        ElementwiseInputs<T, N> part_in = in;
        for (int k = 0; k < N; ++k) part_in.ptr[k] = static_cast<const T*>(part[k + 1].data_ptr());
        int64_t part_n = part[0].numel();
        elementwise_strided_kernel<R, T, N, F><<<grid_for(part_n), kThreadsPerBlock, 0, stream>>>(
            static_cast<R*>(part[0].data_ptr()), part_in, layout, part_n, f);
        KILN_CUDA_CHECK_LAUNCH("elementwise_strided_kernel");
      });
}

}  // namespace kiln::cuda
