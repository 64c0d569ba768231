// The kernel-group registry (Note [Kernel groups] in tensor/kernel_group.h):
// a group registered for the CPU is found by type, a device without it is
// an error naming the op and the device, and a second registration is
// refused.
#include <gtest/gtest.h>

#include "tensor/kernel_group.h"
#include "tensor/quantized_kernels.h"
#include "tensor/scan_kernels.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

// A group only this test registers, so that it is missing on every device
// but the CPU in every build.
class EchoKernels : public KernelGroup {
 public:
  static constexpr std::string_view kName = "echo";
  virtual int echo(int value) = 0;
};

class CpuEchoKernels final : public EchoKernels {
 public:
  int echo(int value) override { return value + 1; }
};

KILN_REGISTER_KERNEL_GROUP(EchoKernels, DeviceType::CPU, CpuEchoKernels);

TEST(KernelGroup, ARegisteredGroupIsFoundByType) {
  EXPECT_TRUE(has_kernels<EchoKernels>(kCPU));
  EXPECT_EQ(kernels_for<EchoKernels>(kCPU, "echo").echo(41), 42);
  // The same instance every time.
  EXPECT_EQ(&kernels_for<EchoKernels>(kCPU, "a"), &kernels_for<EchoKernels>(kCPU, "b"));
}

TEST(KernelGroup, AMissingGroupNamesTheOpAndTheDevice) {
  EXPECT_FALSE(has_kernels<EchoKernels>(cuda_device(1)));
  expect_error([] { kernels_for<EchoKernels>(cuda_device(1), "echo_twice"); },
               "echo_twice: echo kernels are not supported on cuda:1");
}

TEST(KernelGroup, ASecondRegistrationIsRefused) {
  static CpuEchoKernels another;
  expect_error([] { detail::register_kernel_group(typeid(EchoKernels), EchoKernels::kName, DeviceType::CPU, &another); },
               "register_kernel_group: echo kernels registered twice for device type cpu");
  EXPECT_NE(&kernels_for<EchoKernels>(kCPU, "echo"), static_cast<EchoKernels*>(&another));
}

TEST(KernelGroup, TheCpuBackendRegistersItsGroups) {
  EXPECT_TRUE(has_kernels<ScanKernels>(kCPU));
  EXPECT_TRUE(has_kernels<QuantizedKernels>(kCPU));
  // The int8 kernels are CPU only in every build.
  EXPECT_FALSE(has_kernels<QuantizedKernels>(cuda_device(0)));
#ifdef KILN_WITH_CUDA
  EXPECT_TRUE(has_kernels<ScanKernels>(cuda_device(0)));
#else
  EXPECT_FALSE(has_kernels<ScanKernels>(cuda_device(0)));
#endif
}

}  // namespace
}  // namespace kiln
