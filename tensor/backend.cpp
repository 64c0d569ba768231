#include "tensor/backend.h"

#include "tensor/cpu/cpu_backend.h"
#ifdef KILN_WITH_CUDA
#include "tensor/cuda/cuda_backend.h"
#endif

namespace kiln {

Backend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::CPU: return cpu::backend();
    case DeviceType::CUDA:
#ifdef KILN_WITH_CUDA
      return cuda::backend();
#else
      KILN_FAIL("Kiln was built without CUDA (KILN_CUDA=OFF): cannot run on ", device);
#endif
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
