// Which CUDA devices exist, and which one the calling thread is working on.
//
// The CUDA runtime keeps a "current device" per host thread; allocations,
// copies and kernel launches go to it. Kiln code never relies on whatever
// the caller left current: every entry point that touches a device's memory
// holds a DeviceGuard for the tensor's device.
//   cuda::DeviceGuard guard(out.device());  // now on out's GPU; restored at scope end
//
// This header does not include the CUDA runtime, so plain C++ (tests, other
// layers) can ask whether a GPU is there.
#pragma once

#include "tensor/cuda_status.h"
#include "tensor/device.h"

namespace kiln::cuda {

// What the CUDA runtime says, asked once: the number of usable devices (0,
// never an error, when there is no GPU, no driver, or the driver is too old
// for this build's runtime) and why there are none. cuda_status.h's
// device_count() and unavailable_reason(), which every build has, end here
// when libkiln_cuda is loaded.
int driver_device_count();
std::string driver_unavailable_reason();

// True when at least one CUDA device can run Kiln's kernels.
bool cuda_available();

// Throws kiln::Error unless `device` is a CUDA device this process can use,
// saying why not (no GPU or driver at all, or an ordinal past the last one).
// `op` names the caller in the message.
void check_device(Device device, const char* op);

// Makes `device` current for the calling thread and restores the previous
// device when destroyed. Throws as check_device (naming `op`) when the device
// is unusable.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device, const char* op = "DeviceGuard");
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace kiln::cuda
