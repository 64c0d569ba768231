#include "tensor/cpu/cpu_quantized.h"

namespace kiln::cpu {

std::shared_ptr<const PackedQuantizedWeight> CpuQuantizedKernels::pack_weight(const Tensor&) { KILN_FAIL("pack_weight: not yet written (issue 23 in progress)"); }

void CpuQuantizedKernels::linear(const Tensor&, const Tensor&, const PackedQuantizedWeight&, const Tensor&, bool) { KILN_FAIL("quantized linear: not yet written (issue 23 in progress)"); }

void CpuQuantizedKernels::linear_dynamic(const Tensor&, const Tensor&, const PackedQuantizedWeight&, const Tensor&, bool) { KILN_FAIL("quantized linear: not yet written (issue 23 in progress)"); }

}  // namespace kiln::cpu
