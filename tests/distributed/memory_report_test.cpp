// memory_report: bytes counted by unique storage, against hand-computed
// sizes, and the allocator's figures beside them. ZeRO's sharded state and
// gradients are checked in zero_test.cpp.
#include "distributed/memory_report.h"

#include <gtest/gtest.h>

#include "nn/functional.h"
#include "nn/linear.h"
#include "optim/adam.h"
#include "tensor/allocator.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln::distributed {
namespace {

// One Adam step of Linear(4, 3) in float32 on `device`.
void one_adam_step(nn::Linear& linear, optim::Adam& opt, Device device) {
  opt.zero_grad();
  sum(linear.forward(ones({2, 4}, TensorOptions(DType::Float32, device)))).backward();
  opt.step();
}

TEST(MemoryReport, CountsParametersGradientsAndAdamStateOfALinearLayer) {
  nn::Linear linear(4, 3);
  optim::Adam opt(linear.parameters(), optim::AdamOptions());
  MemoryReport before = memory_report(linear, &opt);
  EXPECT_EQ(before.parameter_bytes, 60u);  // weight (3, 4) and bias (3): 15 float32
  EXPECT_EQ(before.gradient_bytes, 0u);
  EXPECT_EQ(before.optimizer_state_bytes, 0u);

  one_adam_step(linear, opt, kCPU);
  const MemoryReport after = memory_report(linear, &opt);
  EXPECT_EQ(after.parameter_bytes, 60u);
  EXPECT_EQ(after.gradient_bytes, 60u);
  // exp_avg and exp_avg_sq (15 float32 each) and a float64 step per parameter.
  EXPECT_EQ(after.optimizer_state_bytes, 60u + 60u + 2 * 8u);
  EXPECT_EQ(after.device, "cpu");
  EXPECT_GE(after.allocated_bytes, after.parameter_bytes + after.gradient_bytes + after.optimizer_state_bytes);
  EXPECT_GE(after.peak_allocated_bytes, after.allocated_bytes);
  // Without the optimizer, its state is not counted.
  EXPECT_EQ(memory_report(linear, nullptr).optimizer_state_bytes, 0u);

  opt.zero_grad();
  EXPECT_EQ(memory_report(linear, &opt).gradient_bytes, 0u);
}

// Two parameters that are views of parts of one 16-element buffer, with one
// gradient buffer behind both gradients: as an FSDP unit's flat shard.
class SharedStorage : public nn::Module {
 public:
  SharedStorage() {
    Tensor flat = zeros({16});
    a = register_parameter("a", flat.narrow(0, 0, 4).detach());
    b = register_parameter("b", flat.narrow(0, 4, 6).detach());
    Tensor grads = zeros({16});
    a.set_grad(grads.narrow(0, 0, 4));
    b.set_grad(grads.narrow(0, 4, 6));
  }
  Tensor a, b;
};

TEST(MemoryReport, CountsEachStorageOnceAndWhole) {
  SharedStorage module;
  const MemoryReport report = memory_report(module, nullptr);
  // 10 elements are parameters, but the buffer holding them has 16.
  EXPECT_EQ(report.parameter_bytes, 64u);
  EXPECT_EQ(report.gradient_bytes, 64u);
}

TEST(MemoryReport, AllocatedAndPeakAreTheAllocatorsFigures) {
  nn::Linear linear(4, 3);
  const size_t base = memory_report(linear, nullptr).allocated_bytes;
  EXPECT_EQ(base, cpu_allocated_bytes());
  cpu_reset_peak_allocated_bytes();
  {
    Tensor temporary = empty({1 << 19});  // 2 MiB, freed at once
  }
  Tensor kept = empty({1 << 18});  // 1 MiB
  const MemoryReport report = memory_report(linear, nullptr);
  EXPECT_EQ(report.allocated_bytes - base, size_t{1} << 20);
  EXPECT_GE(report.peak_allocated_bytes, base + (size_t{2} << 20));
}

TEST(MemoryReport, StrPrintsOneLine) {
  MemoryReport r;
  r.parameter_bytes = 512;
  r.gradient_bytes = 1536;
  r.optimizer_state_bytes = 12897485;  // 12.3 MiB
  r.allocated_bytes = size_t{2} << 30;
  r.peak_allocated_bytes = 0;
  r.device = "cpu";
  EXPECT_EQ(r.str(), "params 512 B, grads 1.50 KiB, optimizer 12.3 MiB, allocated 2.00 GiB, peak 0 B (cpu)");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
}

#ifdef KILN_WITH_CUDA
TEST(MemoryReport, CountsOnlyTheTensorsOfTheDeviceAskedFor) {
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  const Device gpu = cuda_device(0);
  nn::Linear linear(4, 3);
  linear.to(gpu);
  optim::Adam opt(linear.parameters(), optim::AdamOptions());
  one_adam_step(linear, opt, gpu);
  const MemoryReport on_gpu = memory_report(linear, &opt, gpu);
  EXPECT_EQ(on_gpu.device, "cuda:0");
  EXPECT_EQ(on_gpu.parameter_bytes, 60u);
  EXPECT_EQ(on_gpu.gradient_bytes, 60u);
  // The moments live on the GPU, the step counts on the host.
  EXPECT_EQ(on_gpu.optimizer_state_bytes, 120u);
  EXPECT_EQ(memory_report(linear, &opt, kCPU).optimizer_state_bytes, 16u);
  EXPECT_EQ(memory_report(linear, &opt, kCPU).parameter_bytes, 0u);
  EXPECT_GE(on_gpu.allocated_bytes, 240u);
  EXPECT_GE(on_gpu.peak_allocated_bytes, on_gpu.allocated_bytes);
}
#endif

}  // namespace
}  // namespace kiln::distributed
