// CUDA random fills: the same Philox4x32-10 stream and the same bit-to-value
// recipes as the CPU kernels (tensor/cpu/random.cpp, whose header comment
// describes them), so that a seed and offset give the same tensor on both
// devices (Note [Random streams] in tensor/random.h).
//
// Element i is a pure function of (seed, offset + i): each thread computes
// its elements alone, in any order. The double arithmetic goes through the
// _rn intrinsics, because nvcc would otherwise contract a + (b - a) * u into
// one fused multiply-add, which rounds once where the CPU (compiled without
// FMA) rounds twice; the normal values come from philox::normal_value, the
// CPU's own code (Note [Bitwise random streams] in tensor/philox.h). Every
// distribution and dtype thus matches the CPU bit for bit.
#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/philox.h"

namespace kiln::cuda {

namespace {

// A double value stored as D, as the CPU's cast_to: bool is "non-zero", the
// floats round through float for 16 bits, integers truncate.
template <class D>
__device__ D cast_to(double v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != 0.0;
  } else {
    return from_compute<D>(v);
  }
}

template <class D>
__device__ double to_double(D v) {
  return static_cast<double>(to_compute(v));
}

// a + (b - a) * u rounded to D; a value that rounds up to b becomes a, so
// the result lies in [a, b) (as the CPU).
template <class D, bool kDouble>
__device__ D uniform_value(const philox::Block& w, double a, double b) {
  double u = kDouble ? philox::uniform53(w.w[0], w.w[1]) : philox::uniform24(w.w[0]);
  D value = cast_to<D>(__dadd_rn(a, __dmul_rn(b - a, u)));
  if (to_double(value) >= b && a < b) value = cast_to<D>(a);
  return value;
}

// out: (n) contiguous; D the device type of the element.
template <class D, Distribution kDist>
__global__ void random_kernel(D* out, int64_t n, double a, double b, uint64_t seed, uint64_t offset) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const philox::Block w = philox::element_block(seed, offset, static_cast<uint64_t>(i));
    if constexpr (kDist == Distribution::Uniform) {
      out[i] = uniform_value<D, std::is_same_v<D, double>>(w, a, b);
    } else if constexpr (kDist == Distribution::Normal) {
      out[i] = cast_to<D>(philox::normal_value(w, a, b));
    } else if constexpr (kDist == Distribution::Bernoulli) {
      out[i] = cast_to<D>(philox::uniform53(w.w[0], w.w[1]) < a ? 1.0 : 0.0);
    } else {  // RandInt over [a, b): the front-end keeps b - a within 2^54
      const auto low = static_cast<int64_t>(a);
      const auto range = static_cast<uint64_t>(static_cast<int64_t>(b) - low);
      const int64_t v = low + static_cast<int64_t>(philox::multiply_shift(philox::join64(w.w[0], w.w[1]), range));
      if constexpr (std::is_integral_v<D>) {
        out[i] = static_cast<D>(v);
      } else {
        out[i] = cast_to<D>(static_cast<double>(v));
      }
    }
  }
}

template <class D, Distribution kDist>
void launch_random(D* out, int64_t n, double a, double b, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  random_kernel<D, kDist><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(out, n, a, b, seed, offset);
  KILN_CUDA_CHECK_LAUNCH("random_kernel");
}

}  // namespace

void CudaBackend::random(const Tensor& out, Distribution dist, double a, double b, uint64_t seed, uint64_t offset) {
  KILN_CHECK(out.is_contiguous(), "random: the output must be contiguous, got shape ", out.shape(), " and strides ",
             out.strides());
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device(), "random");
  cudaStream_t stream = current_raw_stream(out.device());
  visit_dtype(out.dtype(), [&]<class T>() {
    using D = DeviceType<T>;
    D* data = static_cast<D*>(out.data_ptr());
    const int64_t n = out.numel();
    switch (dist) {
      case Distribution::Uniform: return launch_random<D, Distribution::Uniform>(data, n, a, b, seed, offset, stream);
      case Distribution::Normal: return launch_random<D, Distribution::Normal>(data, n, a, b, seed, offset, stream);
      case Distribution::Bernoulli:
        return launch_random<D, Distribution::Bernoulli>(data, n, a, b, seed, offset, stream);
      case Distribution::RandInt: return launch_random<D, Distribution::RandInt>(data, n, a, b, seed, offset, stream);
    }
    KILN_FAIL("random: invalid distribution code ", static_cast<int>(dist));
  });
}

}  // namespace kiln::cuda
