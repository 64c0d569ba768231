#include "tensor/cpu/cpu_quantized.h"

namespace kiln::cpu {

KILN_REGISTER_KERNEL_GROUP(QuantizedKernels, DeviceType::CPU, CpuQuantizedKernels);

}  // namespace kiln::cpu
