// The CPU's scan kernels (tensor/scan_kernels.h). The contiguous input is
// seen as (outer, n, inner) around the scanned dim. Threads split the outer
// index; for inner > 1 each thread carries a row of `inner` accumulators
// down the n rows, so every read and write is sequential in memory.
#include <algorithm>
#include <vector>

#include "tensor/cpu/parallel.h"
#include "tensor/scan_kernels.h"

namespace kiln::cpu {
namespace {

// torch's CPU accumulator: float64 for every float, int64 for integers.
template <class T>
using ScanAccumulator = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

template <class T>
void scan_typed(ScanOp op, const Tensor& out, const Tensor& in, int64_t dim, bool reverse) {
  using A = ScanAccumulator<T>;
  const int64_t n = in.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  const T* src = in.data<T>();  // in: (outer, n, inner)
  T* dst = out.data<T>();       // out: (outer, n, inner)
  const A identity = op == ScanOp::Sum ? A(0) : A(1);
  const int64_t grain = std::max<int64_t>(1, 32768 / (n * inner));
  parallel_for(0, outer, grain, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(inner);  // acc: (inner), the running results of one outer index
    for (int64_t o = begin; o < end; ++o) {
      std::fill(acc.begin(), acc.end(), identity);
      for (int64_t step = 0; step < n; ++step) {
        const int64_t i = reverse ? n - 1 - step : step;
        const T* row = src + (o * n + i) * inner;
        T* out_row = dst + (o * n + i) * inner;
        for (int64_t j = 0; j < inner; ++j) {
          const A v = static_cast<A>(static_cast<ComputeType<T>>(row[j]));
          // Integers wrap around on overflow, as torch's do: the
          // arithmetic is done unsigned, where wrapping is defined.
          if constexpr (std::is_integral_v<A>) {
            const uint64_t a = static_cast<uint64_t>(acc[j]), b = static_cast<uint64_t>(v);
            acc[j] = static_cast<A>(op == ScanOp::Sum ? a + b : a * b);
          } else {
            acc[j] = op == ScanOp::Sum ? acc[j] + v : acc[j] * v;
          }
          out_row[j] = static_cast<T>(static_cast<ComputeType<T>>(acc[j]));
        }
      }
    }
  });
}

class CpuScanKernels final : public ScanKernels {
 public:
  void scan(ScanOp op, const Tensor& out, const Tensor& in, int64_t dim, bool reverse) override {
    visit_dtype(in.dtype(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool>) {
        KILN_FAIL("scan: bool tensors are not scanned (the front-end converts them)");
      } else {
        scan_typed<T>(op, out, in, dim, reverse);
      }
    });
  }
};

}  // namespace

KILN_REGISTER_KERNEL_GROUP(ScanKernels, DeviceType::CPU, CpuScanKernels);

}  // namespace kiln::cpu
