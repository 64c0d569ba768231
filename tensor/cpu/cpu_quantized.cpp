#include "tensor/cpu/cpu_quantized.h"

#include "tensor/cpu/cpu_backend.h"

namespace kiln::cpu {

QuantizedKernels* CpuBackend::quantized() {
  static CpuQuantizedKernels kernels;
  return &kernels;
}

}  // namespace kiln::cpu
