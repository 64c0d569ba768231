#include "tensor/quantized_kernels.h"

namespace kiln {

QuantizedKernels& quantized_kernels_for(Device device, std::string_view op) {
  QuantizedKernels* kernels = backend_for(device).quantized();
  KILN_CHECK(kernels != nullptr, op, ": quantized kernels are not supported on ", device,
             " (Kiln's int8 kernels are CPU only; move the model and its inputs to the CPU)");
  return *kernels;
}

}  // namespace kiln
