// ScanKernels: cumulative sums and products along one dim, a kernel group
// (Note [Kernel groups] in tensor/kernel_group.h). The front-ends are in
// tensor/scan.h; the CPU kernels in tensor/cpu/scan.cpp, the CUDA ones in
// tensor/cuda/scan.cu.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/kernel_group.h"
#include "tensor/tensor.h"

namespace kiln {

enum class ScanOp : uint8_t { Sum, Prod };

class ScanKernels : public KernelGroup {
 public:
  static constexpr std::string_view kName = "scan";

  // out[..., i, ...] = in[..., 0, ...] op ... op in[..., i, ...] along
  // `dim` (reverse: in[..., i, ...] op ... op in[..., n-1, ...]).
  // in and out: one shape and dtype (any but Bool), both contiguous, not
  // empty; 0 <= dim < in.dim(). Each partial result is carried in the
  // kernel's accumulator type, at least float32 for floats (the CPU's is
  // float64, as torch's) and int64 for integers (which wrap around as
  // torch's do), and rounded to out's dtype when written.
  virtual void scan(ScanOp op, const Tensor& out, const Tensor& in, int64_t dim, bool reverse) = 0;
};

}  // namespace kiln
