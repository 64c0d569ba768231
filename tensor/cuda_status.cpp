// tensor/cuda_status.h. In a build with CUDA, device_count() and
// unavailable_reason() live beside the rest of device discovery
// (tensor/cuda/device.cpp); here is what a build without CUDA answers.
#include "tensor/cuda_status.h"

namespace kiln::cuda {

bool is_available() { return device_count() > 0; }

#ifndef KILN_WITH_CUDA
int device_count() { return 0; }

std::string unavailable_reason() {
  return "this Kiln was built without CUDA (configure it with -DKILN_CUDA=ON and the CUDA toolkit)";
}
#endif

}  // namespace kiln::cuda
