#include "tensor/cpu/cpu_quantized.h"

namespace kiln::cpu {

void CpuQuantizedKernels::max_pool2d(const Tensor&, const Tensor&, const PoolGeometry&) { KILN_FAIL("quantized max_pool2d: not yet written (issue 23 in progress)"); }

void CpuQuantizedKernels::avg_pool2d(const Tensor&, const Tensor&, const PoolGeometry&, bool, std::optional<int64_t>) { KILN_FAIL("quantized avg_pool2d: not yet written (issue 23 in progress)"); }

void CpuQuantizedKernels::adaptive_avg_pool2d(const Tensor&, const Tensor&) { KILN_FAIL("quantized adaptive_avg_pool2d: not yet written (issue 23 in progress)"); }

}  // namespace kiln::cpu
