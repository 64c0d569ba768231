#include "tensor/cpu/cpu_quantized.h"

namespace kiln::cpu {

void CpuQuantizedKernels::quantize(const Tensor&, const Tensor&) { KILN_FAIL("quantize: not yet written (issue 23 in progress)"); }

void CpuQuantizedKernels::dequantize(const Tensor&, const Tensor&) { KILN_FAIL("dequantize: not yet written (issue 23 in progress)"); }

void CpuQuantizedKernels::requantize(const Tensor&, const Tensor&) { KILN_FAIL("requantize: not yet written (issue 23 in progress)"); }

}  // namespace kiln::cpu
