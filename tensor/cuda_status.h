// Whether Kiln can use a CUDA GPU here, asked the same way in every build:
//
//   if (kiln::cuda::is_available()) model->to(Device(DeviceType::CUDA));
//   else std::cerr << "training on the CPU: " << kiln::cuda::unavailable_reason() << "\n";
//
// A build without CUDA (KILN_CUDA=OFF) answers 0 devices and says so; a
// build with CUDA asks the driver once (tensor/cuda/device.h, which declares
// device_count() too and cuda_available() for is_available(), has the rest
// of the device API in such builds).
#pragma once

#include <string>

namespace kiln::cuda {

// Number of usable CUDA devices; 0 (never an error) without CUDA support in
// this build, without a GPU or driver, or with a driver too old for this
// build's runtime.
int device_count();

// True when at least one CUDA device can run Kiln's kernels.
bool is_available();

// Why is_available() is false ("this Kiln was built without CUDA ...",
// "cudaErrorNoDevice: no CUDA-capable device is detected"); empty when it is true.
std::string unavailable_reason();

}  // namespace kiln::cuda
