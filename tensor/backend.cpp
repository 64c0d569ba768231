#include "tensor/backend.h"

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cuda_hooks.h"

namespace kiln {

Backend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU: return cpu::backend();
    case DeviceType::CUDA: {
      // In libkiln_cuda, loaded on first use (Note [Backends as plugins]).
      const cuda::CudaHooks* hooks = cuda::cuda_hooks();
      KILN_CHECK(hooks != nullptr, "cannot run on ", device, ": ", cuda::cuda_library_error());
      return hooks->backend();
    }
  }
  KILN_FAIL("backend_for: invalid device type ", static_cast<int>(device.type));
}

bool capturing(Device device) { return !device.is_cpu() && backend_for(device).capturing(device); }

Backend& backend_for_copy(Device dst, Device src) {
  if (dst.is_cpu()) return backend_for(src);
  KILN_CHECK(src.is_cpu() || src.type == dst.type, "copy_: cannot copy from ", src, " to ", dst);
  return backend_for(dst);
}

}  // namespace kiln
