// The plain CUDA GEMM kernel (tensor/cuda/gemm_reference.h).
#include <type_traits>

#include "tensor/cuda/check.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/gemm_reference.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

// Strides of one operand, in elements: batch, row, column.
struct MatrixStrides {
  int64_t batch, row, col;
};

MatrixStrides strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// The type a dot product accumulates in: int64 for integers and bool (as
// the CPU backend), the compute type for floats.
template <class T>
using Accumulator = std::conditional_t<std::is_integral_v<T>, int64_t, decltype(to_compute(T{}))>;

// c: (B, M, N), a: (B, M, K), b: (B, K, N); one thread per element of c,
// the column index fastest so that neighbouring threads read neighbouring b
// columns and write neighbouring c columns.
template <class T>
__global__ void reference_gemm_kernel(T* c, const T* a, const T* b, MatrixStrides sc, MatrixStrides sa,
                                      MatrixStrides sb, int64_t batch, int64_t m, int64_t n, int64_t k, double alpha,
                                      double beta) {
  using Acc = Accumulator<T>;
  const int64_t total = batch * m * n;
  const bool plain = alpha == 1.0 && beta == 0.0;
  for (int64_t index = global_thread_index(); index < total; index += grid_stride()) {
    const int64_t j = index % n, i = (index / n) % m, bi = index / (n * m);
    const T* arow = a + bi * sa.batch + i * sa.row;
    const T* bcol = b + bi * sb.batch + j * sb.col;
    Acc sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      sum += static_cast<Acc>(to_compute(arow[p * sa.col])) * static_cast<Acc>(to_compute(bcol[p * sb.row]));
    }
    T& out = c[bi * sc.batch + i * sc.row + j * sc.col];
    if constexpr (std::is_integral_v<T>) {
      if (plain) {
        out = static_cast<T>(sum);
      } else {
        const double old = beta == 0.0 ? 0.0 : beta * static_cast<double>(out);
        out = numeric_cast<T>(alpha * static_cast<double>(sum) + old);  // Note [Float to integer conversion]
      }
    } else {
      using C = decltype(to_compute(T{}));
      const C old = beta == 0.0 ? C(0) : static_cast<C>(beta) * to_compute(out);
      out = from_compute<T>(static_cast<C>(alpha) * sum + old);
    }
  }
}

template <class T>
void launch_reference_gemm(T* c, const T* a, const T* b, MatrixStrides sc, MatrixStrides sa, MatrixStrides sb,
                           int64_t batch, int64_t m, int64_t n, int64_t k, double alpha, double beta,
                           cudaStream_t stream) {
  reference_gemm_kernel<T><<<grid_for(batch * m * n), kThreadsPerBlock, 0, stream>>>(c, a, b, sc, sa, sb, batch, m,
                                                                                     n, k, alpha, beta);
  KILN_CUDA_CHECK_LAUNCH("reference_gemm_kernel");
}

}  // namespace

void reference_gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = a.size(2);
  if (batch * m * n == 0) return;
  visit_dtype(c.dtype(), [&]<class KT>() {
    using T = DeviceType<KT>;
    launch_reference_gemm(static_cast<T*>(c.data_ptr()), static_cast<const T*>(a.data_ptr()),
                          static_cast<const T*>(b.data_ptr()), strides_of(c), strides_of(a), strides_of(b), batch,
                          m, n, k, alpha, beta, current_raw_stream(c.device()));
  });
}

}  // namespace kiln::cuda
