// CpuBackend::gemm: the Tensor-level batched product. float32 and float64 run
// on Kiln's GEMM (tensor/cpu/gemm.h) directly through the tensors' strides;
// the 16-bit floats go through float32 copies (their products would lose too
// much precision accumulating in 16 bits anyway); integer types use a plain
// loop accumulating in int64, as nothing performance-critical needs them.
#include <algorithm>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/parallel.h"
#include "tensor/numeric_cast.h"

namespace kiln::cpu {
namespace {

// c: (B, M, N), a: (B, M, K), b: (B, K, N) as the backend receives them.
template <class T>
GemmArgs<T> gemm_args(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  GemmArgs<T> g;
  g.batch = c.size(0);
  g.m = c.size(1);
  g.n = c.size(2);
  g.k = a.size(2);
  g.alpha = static_cast<T>(alpha);
  g.beta = static_cast<T>(beta);
  g.a = a.data<T>();
  g.bsa = a.stride(0), g.rsa = a.stride(1), g.csa = a.stride(2);
  g.b = b.data<T>();
  g.bsb = b.stride(0), g.rsb = b.stride(1), g.csb = b.stride(2);
  g.c = c.data<T>();
  g.bsc = c.stride(0), g.rsc = c.stride(1), g.csc = c.stride(2);
  return g;
}

// Rows of C below this many multiply-adds stay on one thread.
constexpr int64_t kIntegerGrainMacs = int64_t{1} << 16;

template <class T>
void integer_gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = a.size(2);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c.data<T>();
  const bool plain = alpha == 1.0 && beta == 0.0;
  int64_t grain = std::max<int64_t>(1, kIntegerGrainMacs / std::max<int64_t>(1, n * k));
  parallel_for(0, batch * m, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t bi = row / m, i = row % m;
      const T* arow = pa + bi * a.stride(0) + i * a.stride(1);
      const T* bmat = pb + bi * b.stride(0);
      T* crow = pc + bi * c.stride(0) + i * c.stride(1);
      for (int64_t j = 0; j < n; ++j) {
        int64_t sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          int64_t x = static_cast<int64_t>(arow[p * a.stride(2)]);
          sum += x * static_cast<int64_t>(bmat[p * b.stride(1) + j * b.stride(2)]);
        }
        T& out = crow[j * c.stride(2)];
        if (plain) {
          out = static_cast<T>(sum);
        } else {
          double old = beta == 0.0 ? 0.0 : beta * static_cast<double>(out);
          out = numeric_cast<T>(alpha * static_cast<double>(sum) + old);  // Note [Float to integer conversion]
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  switch (c.dtype()) {
    case DType::Float32: return sgemm_batched(gemm_args<float>(c, a, b, alpha, beta));
    case DType::Float64: return dgemm_batched(gemm_args<double>(c, a, b, alpha, beta));
    case DType::Float16:
    case DType::BFloat16: {
      Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32);
      // c32: (B, M, N); holds c's old values only when they are read.
      Tensor c32 = beta == 0.0 ? Tensor::empty(c.shape(), DType::Float32) : c.to(DType::Float32);
      sgemm_batched(gemm_args<float>(c32, a32, b32, alpha, beta));
      copy(c, c32);
      return;
    }
    default:
      visit_dtype(c.dtype(), [&]<class T>() {
        if constexpr (std::is_integral_v<T>) integer_gemm<T>(c, a, b, alpha, beta);
      });
  }
}

}  // namespace kiln::cpu
