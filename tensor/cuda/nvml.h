// GPU utilisation and memory from NVML, the driver's monitoring library, for
// progress lines and logs.
//
// NVML ships with the NVIDIA driver, not with the CUDA toolkit, so it is
// loaded at run time (dlopen "libnvidia-ml.so.1") rather than linked: Kiln
// built with CUDA still starts on a machine without a driver, and there
// every query answers "no status" instead of failing.
// cuda::gpu_status(device) (tensor/cuda_status.h, in every build) ends here
// when libkiln_cuda is loaded.
//
// This header does not include the CUDA runtime or NVML's headers.
#pragma once

#include <optional>

#include "tensor/cuda_status.h"

namespace kiln::cuda {

// True when NVML was loaded and initialised: the driver is installed.
bool nvml_available();

// The status of CUDA device `device` (a CUDA ordinal, which NVML numbers
// differently: the device is found by its PCI bus id). std::nullopt, never an
// error, when NVML or the driver is absent, the ordinal names no device, or
// NVML cannot answer for it (some virtualised GPUs). Thread-safe.
std::optional<GpuStatus> nvml_gpu_status(int device);

}  // namespace kiln::cuda
