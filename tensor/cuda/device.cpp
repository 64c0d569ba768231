// Device discovery and the current-device guard (tensor/cuda/device.h).
#include "tensor/cuda/device.h"

#include <cuda_runtime.h>

#include <string>

#include "tensor/cuda/check.h"
#include "tensor/cuda_status.h"

namespace kiln::cuda {

namespace {

struct DeviceCount {
  int count = 0;
  cudaError_t status = cudaSuccess;  // why count is 0, when it is
};

// Asked once: the answer cannot change while the process runs, and
// cudaGetDeviceCount is the call that first loads the driver.
const DeviceCount& query_device_count() {
  static const DeviceCount result = [] {
    DeviceCount r;
    r.status = cudaGetDeviceCount(&r.count);
    if (r.status != cudaSuccess) {
      // No driver (cudaErrorInsufficientDriver) or no GPU (cudaErrorNoDevice)
      // are normal on a CPU-only machine; clear the error slot so the next
      // launch check does not report it.
      (void)cudaGetLastError();
      r.count = 0;
    }
    return r;
  }();
  return result;
}

}  // namespace

int driver_device_count() { return query_device_count().count; }

bool cuda_available() { return driver_device_count() > 0; }

std::string driver_unavailable_reason() {
  const DeviceCount& devices = query_device_count();
  if (devices.count > 0) return "";
  return devices.status == cudaSuccess
             ? std::string("the driver reports 0 devices")
             : std::string(cudaGetErrorName(devices.status)) + ": " + cudaGetErrorString(devices.status);
}

void check_device(Device device, const char* op) {
  KILN_CHECK(device.is_cuda(), op, ": expected a CUDA device, got ", device);
  const DeviceCount& devices = query_device_count();
  if (devices.count == 0)
    KILN_FAIL(op, ": cannot use ", device, ": no CUDA device is available (", driver_unavailable_reason(),
              "); Kiln was built with CUDA but this machine has no usable GPU or NVIDIA driver");
  KILN_CHECK(device.index >= 0 && device.index < devices.count, op, ": cannot use ", device, ": this process sees ",
             devices.count, " CUDA device(s), cuda:0 to cuda:", devices.count - 1);
}

DeviceGuard::DeviceGuard(Device device, const char* op) {
  check_device(device, op);
  int current = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) {
    KILN_CUDA_CHECK(cudaSetDevice(device.index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; switching back to a device that was current
  // a moment ago does not fail unless the context is already broken, and then
  // the next checked call reports it.
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace kiln::cuda
