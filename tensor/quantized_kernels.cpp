#include "tensor/quantized_kernels.h"

namespace kiln {

QuantizedKernels& quantized_kernels_for(Device device, std::string_view op) {
  KILN_CHECK(has_kernels<QuantizedKernels>(device), op, ": quantized kernels are not supported on ", device,
             " (Kiln's int8 kernels are CPU only; move the model and its inputs to the CPU)");
  return kernels_for<QuantizedKernels>(device, op);
}

}  // namespace kiln
