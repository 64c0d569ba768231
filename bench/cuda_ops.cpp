// cuda_ops: Kiln's CUDA GEMM and elementwise kernels against their anchors,
// in one run on one GPU.
//
// - GEMM: ops::mm on (4096, 4096) matrices in float32 and bfloat16 against
//   the same product called on raw cuBLAS (cublasGemmEx, float32
//   accumulation, TF32 off as Kiln's default) on the same buffers. Target:
//   Kiln within 5% of cuBLAS (ratio >= 0.95).
//     cuda_gemm dtype=float32 n=4096 kiln_tflops=.. cublas_tflops=.. ratio=..
// - Elementwise: a + b, a * 2 and relu(a) over 64 Mi float32 elements,
//   as bandwidth (bytes read + written per second) against a device-to-device
//   cudaMemcpyAsync of the same tensor. Target: >= 80% of the copy's.
//     cuda_elementwise op=add kiln_gb_s=.. copy_gb_s=.. ratio=..
// Every figure is the median of kRepeats timings between CUDA events, each
// over kBatch calls queued back to back, after kWarmup untimed calls.
//
// Usage: build/bench/cuda_ops [--n N] [--elements E]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln.h"
#include "tensor/cuda/check.h"
#include "tensor/cuda/cublas.h"
#include "tensor/cuda/stream.h"

namespace {

using kiln::Tensor;

constexpr int kWarmup = 3;
constexpr int kRepeats = 21;
// Calls per timing: the GPU is idle when a timing starts, so the first
// call's host work (Kiln's checks and allocation, or the bare cuBLAS call)
// shows in it; later calls queue while the GPU runs the earlier ones, as in
// a real program. kBatch calls between one pair of events spread that start
// over many, so that what is compared is the device time.
constexpr int kBatch = 10;

// Median milliseconds of one call of `body`, timed between events on the
// current stream over kBatch calls.
double median_ms(kiln::Device device, const std::function<void()>& body) {
  for (int i = 0; i < kWarmup; ++i) body();
  const kiln::cuda::Stream stream = kiln::cuda::current_stream(device);
  std::vector<double> times;
  for (int i = 0; i < kRepeats; ++i) {
    kiln::cuda::Event start(true), stop(true);
    start.record(stream);
    for (int j = 0; j < kBatch; ++j) body();
    stop.record(stream);
    stop.synchronize();
    times.push_back(start.elapsed_time(stop) / kBatch);
  }
  std::sort(times.begin(), times.end());
  return times[kRepeats / 2];
}

void bench_gemm(kiln::Device device, int64_t n, kiln::DType dtype) {
  kiln::manual_seed(1);
  const Tensor a = kiln::randn({n, n}).to(dtype, device), b = kiln::randn({n, n}).to(dtype, device);
  Tensor c = kiln::ops::mm(a, b);
  const double kiln_ms = median_ms(device, [&] { c = kiln::ops::mm(a, b); });

  // The same product on raw cuBLAS: row-major C = A B is column-major
  // C^T = B^T A^T, so B goes first.
  const bool bf16 = dtype == kiln::DType::BFloat16;
  const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1.f, beta = 0.f;
  cublasHandle_t handle = kiln::cuda::cublas_handle(device);
  const int dim = static_cast<int>(n);
  const double cublas_ms = median_ms(device, [&] {
    KILN_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &alpha, b.data_ptr(), type, dim,
                                   a.data_ptr(), type, dim, &beta, c.data_ptr(), type, dim, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
  });
  const double flop = 2.0 * double(n) * double(n) * double(n);
  std::printf("cuda_gemm dtype=%s n=%lld kiln_tflops=%.1f cublas_tflops=%.1f ratio=%.3f\n",
              std::string(kiln::dtype_name(dtype)).c_str(), static_cast<long long>(n), flop / kiln_ms / 1e9,
              flop / cublas_ms / 1e9, cublas_ms / kiln_ms);
}

void bench_elementwise(kiln::Device device, int64_t elements) {
  kiln::manual_seed(2);
  const Tensor a = kiln::randn({elements}).to(device), b = kiln::randn({elements}).to(device);
  Tensor out = kiln::empty_like(a);
  const double bytes = 4.0 * double(elements);
  cudaStream_t stream = kiln::cuda::current_raw_stream(device);
  const double copy_ms = median_ms(device, [&] {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), a.data_ptr(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gb_s = 2.0 * bytes / copy_ms / 1e6;
  struct Case {
    const char* name;
    double streams;  // tensors read + written
    std::function<void()> body;
  };
  const std::vector<Case> cases = {
      {"add", 3, [&] { out = kiln::ops::add(a, b); }},
      {"mul_scalar", 2, [&] { out = kiln::ops::mul(a, 2.0); }},
      {"relu", 2, [&] { out = kiln::ops::relu(a); }},
  };
  for (const Case& c : cases) {
    const double gb_s = c.streams * bytes / median_ms(device, c.body) / 1e6;
    std::printf("cuda_elementwise op=%s elements=%lld kiln_gb_s=%.0f copy_gb_s=%.0f ratio=%.3f\n", c.name,
                static_cast<long long>(elements), gb_s, copy_gb_s, gb_s / copy_gb_s);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  int64_t n = 4096, elements = int64_t{1} << 26;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
      n = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--elements") == 0 && i + 1 < argc) {
      elements = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: cuda_ops [--n N] [--elements E]\n");
      return 2;
    }
  }
  const kiln::Device device = kiln::cuda_device(0);
  bench_gemm(device, n, kiln::DType::Float32);
  bench_gemm(device, n, kiln::DType::BFloat16);
  bench_elementwise(device, elements);
  return 0;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
