// The CUDA device allocator behind every Storage on a CUDA device.
#pragma once

#include "tensor/allocator.h"

namespace kiln::cuda {

// The allocator for DeviceType::CUDA (see Note [CUDA allocator] in
// allocator.cpp). Never null; the same object for every device ordinal.
Allocator& cuda_allocator();

// Installs cuda_allocator() for DeviceType::CUDA (set_allocator). Idempotent;
// runs when libkiln is loaded and again when the CUDA backend is first used.
void register_cuda_allocator();

}  // namespace kiln::cuda
