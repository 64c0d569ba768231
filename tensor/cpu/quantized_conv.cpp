#include "tensor/cpu/cpu_quantized.h"

namespace kiln::cpu {

void CpuQuantizedKernels::conv2d(const Tensor&, const Tensor&, const PackedQuantizedWeight&, const Tensor&, const ConvGeometry&, bool) { KILN_FAIL("quantized conv2d: not yet written (issue 23 in progress)"); }

void CpuQuantizedKernels::conv2d_dynamic(const Tensor&, const Tensor&, const PackedQuantizedWeight&, const Tensor&, const ConvGeometry&, bool) { KILN_FAIL("quantized conv2d: not yet written (issue 23 in progress)"); }

}  // namespace kiln::cpu
