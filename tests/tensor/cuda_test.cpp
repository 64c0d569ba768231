// The CUDA backend's foundation: device discovery, the allocator, copies in
// every direction, layout and dtype, and fill. Tests that need a GPU skip
// with a message on machines without one; the ones that check what a user
// sees without a GPU (or without CUDA in the build) always run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/cuda_status.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include <cuda_runtime.h>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#endif

namespace kiln {

using namespace kiln::ops;
namespace {

#ifndef KILN_WITH_CUDA

TEST(CudaWithoutCuda, CudaTensorsThrowNamingTheBuild) {
  expect_error([] { backend_for(cuda_device(0)); },
               "cannot run on cuda:0: this Kiln was built without its cuda backend (KILN_CUDA=OFF): ");
  EXPECT_FALSE(cuda::is_available());
  EXPECT_NE(cuda::unavailable_reason().find("libkiln_cuda.so.0 does not exist"), std::string::npos)
      << cuda::unavailable_reason();
  // Allocation is the first thing a CUDA tensor needs, and it fails first.
  expect_error([] { zeros({2, 3}, cuda_device(0)); }, "KILN_CUDA=OFF");
  Tensor host = iota_tensor({4});
  expect_error([&] { host.to(cuda_device(0)); }, "KILN_CUDA=OFF");
}

#else  // KILN_WITH_CUDA

constexpr DType kAllDTypes[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int32,  DType::Int64,
                                DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

#define SKIP_WITHOUT_GPU() \
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)"

// A CPU tensor of `dtype` holding values 0, 0.75, 1.5, ... taken modulo 100:
// non-negative and below 128, so every dtype holds them without undefined
// conversions, and fractional where the dtype allows.
Tensor sample(const Shape& shape, DType dtype) {
  int64_t numel = shape_numel(shape, "sample");
  std::vector<double> values(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) values[i] = std::fmod(0.75 * static_cast<double>(i), 100.0);
  return from_vector(values, shape).to(dtype);
}

// Both on the CPU, same shape and dtype, and the same bytes element by element.
void expect_same_elements(const Tensor& expected, const Tensor& actual) {
  ASSERT_TRUE(expected.device().is_cpu() && actual.device().is_cpu());
  ASSERT_EQ(expected.shape(), actual.shape());
  ASSERT_EQ(expected.dtype(), actual.dtype());
  Tensor e = expected.contiguous();
  Tensor a = actual.contiguous();
  size_t size = e.element_size();
  const char* pe = static_cast<const char*>(e.data_ptr());
  const char* pa = static_cast<const char*>(a.data_ptr());
  for (int64_t i = 0; i < e.numel(); ++i) {
    if (std::memcmp(pe + i * size, pa + i * size, size) != 0) {
      Tensor ef = e.flatten(), af = a.flatten();
      ADD_FAILURE() << "element " << i << " of " << e.dtype() << " tensor of shape " << detail::str(e.shape())
                    << ": expected " << ef.at<double>({i}) << ", got " << af.at<double>({i});
      return;
    }
  }
}

// ---- without a GPU: clear errors, never a crash -----------------------------

TEST(Cuda, BackendNamesItselfWithoutAGpu) {
  // Constructing the backend needs no GPU (tensor/cuda/cuda_backend.h).
  EXPECT_EQ(backend_for(cuda_device(0)).name(), "cuda");
}

TEST(Cuda, WithoutAGpuCudaTensorsThrowSayingSo) {
  if (cuda::cuda_available()) GTEST_SKIP() << "this machine has a GPU; the no-GPU messages cannot be seen";
  EXPECT_EQ(cuda::device_count(), 0);
  expect_error([] { zeros({2, 3}, cuda_device(0)); }, "no CUDA device is available");
  expect_error([] { Tensor::empty({0}, {DType::Float32, cuda_device(0)}); }, "cannot use cuda:0");
  Tensor host = iota_tensor({4});
  expect_error([&] { host.to(cuda_device(0)); }, "no CUDA device is available");
  expect_error([] { from_vector<float>({1, 2}, {2}, cuda_device(1)); }, "cannot use cuda:1");
}

TEST(Cuda, CheckMacroNamesTheCallAndStatusAndClearsIt) {
  try {
    KILN_CUDA_CHECK(cudaSetDevice(-1));  // fails with or without a GPU
    ADD_FAILURE() << "cudaSetDevice(-1) succeeded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("CUDA error: cudaSetDevice(-1) failed with cudaError"), std::string::npos)
        << e.message();
    EXPECT_NE(std::string(e.what()).find("cuda_test.cpp:"), std::string::npos) << e.what();
  }
  // With a driver the failure is cleared from the last-error slot; without
  // one, every runtime call (cudaGetLastError too) keeps reporting that.
  if (cuda::cuda_available()) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// ---- with a GPU --------------------------------------------------------------

TEST(Cuda, DeviceOrdinalPastTheLastThrows) {
  SKIP_WITHOUT_GPU();
  int count = cuda::device_count();
  expect_error([&] { zeros({2}, cuda_device(count)); },
               "this process sees " + std::to_string(count) + " CUDA device(s)");
}

TEST(Cuda, RoundTripKeepsEveryDtypeBitExact) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // Negative values where the dtype has them (a double -> uint8 conversion
    // of a negative value would be undefined on the CPU side).
    double sign = is_signed(dtype) ? -1.0 : 1.0;
    std::vector<double> values;
    for (int i = 0; i < 1000; ++i) values.push_back((i % 7 == 0 ? sign : 1.0) * 0.375 * (i % 300));
    Tensor host = from_vector(values, {10, 100}).to(dtype);
    Tensor device = host.to(cuda_device(0));
    EXPECT_EQ(device.device(), cuda_device(0));
    EXPECT_EQ(device.dtype(), dtype);
    expect_same_elements(host, device.cpu());
  }
}

TEST(Cuda, HostToDeviceFromStridedAndBroadcastSources) {
  SKIP_WITHOUT_GPU();
  Tensor host = sample({5, 7}, DType::Float32);
  // Transposed source, contiguous destination of the same dtype.
  expect_same_elements(host.t().contiguous(), host.t().to(cuda_device(0)).cpu());
  // Sliced source, converted on the way.
  Tensor sliced = host.slice(1, 1, 7, 2);
  expect_same_elements(sliced.to(DType::Float64), sliced.to(DType::Float64, cuda_device(0)).cpu());
  // A broadcast row copied into a (4, 7) device tensor.
  Tensor row = sample({7}, DType::Int32);
  Tensor device = zeros({4, 7}, {DType::Int32, cuda_device(0)});
  device.copy_(row);
  expect_same_elements(row.expand({4, 7}).contiguous(), device.cpu());
}

TEST(Cuda, HostToDeviceIntoAStridedDestinationLeavesTheRestAlone) {
  SKIP_WITHOUT_GPU();
  Tensor device = full({4, 6}, -1, {DType::Int64, cuda_device(0)});
  Tensor values = sample({4, 3}, DType::Int64);
  device.slice(1, 0, 6, 2).copy_(values);  // every other column
  Tensor back = device.cpu();
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      int64_t expected = j % 2 == 0 ? values.at<int64_t>({i, j / 2}) : -1;
      EXPECT_EQ(back.at<int64_t>({i, j}), expected) << "at (" << i << ", " << j << ")";
    }
  }
}

TEST(Cuda, DeviceToHostFromStridedSourcesAndIntoStridedDestinations) {
  SKIP_WITHOUT_GPU();
  Tensor host = sample({6, 8}, DType::BFloat16);
  Tensor device = host.to(cuda_device(0));
  // Strided device source (gathered by a kernel before the download).
  expect_same_elements(host.t().contiguous(), device.t().cpu());
  expect_same_elements(host.slice(0, 1, 6, 3).to(DType::Float32), device.slice(0, 1, 6, 3).to(DType::Float32, kCPU));
  // Strided host destination (scattered by the CPU after the download).
  Tensor out = zeros({8, 6}, DType::BFloat16);
  out.t().copy_(device);
  expect_same_elements(host.t().contiguous(), out);
  // Strided host destination with conversion.
  Tensor wide = zeros({8, 6}, DType::Float64);
  wide.t().copy_(device);
  expect_same_elements(host.to(DType::Float64).t().contiguous(), wide);
  // A device scalar broadcast into a host tensor.
  Tensor host_out = zeros({3, 2}, DType::Float32);
  host_out.copy_(full({}, 2.5, cuda_device(0)));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(host_out.flatten().at<float>({i}), 2.5f);
}

TEST(Cuda, DeviceToDeviceMatchesTheCpuForEveryLayout) {
  SKIP_WITHOUT_GPU();
  Tensor host = sample({3, 4, 5}, DType::Float32);
  Tensor device = host.to(cuda_device(0));
  expect_same_elements(host.permute({2, 0, 1}).contiguous(), device.permute({2, 0, 1}).contiguous().cpu());
  expect_same_elements(host.clone(), device.clone().cpu());  // one cudaMemcpy
  // Strided destination on the device.
  Tensor dst = zeros({5, 4, 3}, cuda_device(0));
  dst.permute({2, 1, 0}).copy_(device);
  expect_same_elements(host.permute({2, 1, 0}).contiguous(), dst.cpu());
  // Broadcast source on the device.
  Tensor col = sample({3, 1}, DType::Float32);
  Tensor wide = zeros({3, 9}, cuda_device(0));
  wide.copy_(col.to(cuda_device(0)));
  expect_same_elements(col.expand({3, 9}).contiguous(), wide.cpu());
}

TEST(Cuda, LayoutsWithMoreDimsThanTheKernelTakesAreSplit) {
  SKIP_WITHOUT_GPU();
  // 10 dims of size 2, reversed: no two dims merge, so the kernel layout
  // (8 dims at most) cannot hold it in one launch.
  Shape shape(10, 2), reversed;
  for (int64_t d = 9; d >= 0; --d) reversed.push_back(d);
  Tensor host = sample(shape, DType::Int32);
  Tensor device = host.to(cuda_device(0));
  expect_same_elements(host.permute(reversed).contiguous(), device.permute(reversed).contiguous().cpu());
  expect_same_elements(host.permute(reversed).to(DType::Float16),
                       device.permute(reversed).to(DType::Float16).cpu());
}

TEST(Cuda, ConversionOnTheDeviceMatchesTheCpuForEveryDtypePair) {
  SKIP_WITHOUT_GPU();
  for (DType from : kAllDTypes) {
    Tensor host = sample({3, 50}, from);
    Tensor device = host.to(cuda_device(0));
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      expect_same_elements(host.to(to), device.to(to).cpu());                   // contiguous
      expect_same_elements(host.t().to(to), device.t().to(to).cpu());           // strided source
    }
  }
}

TEST(Cuda, SixteenBitRoundingMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {
      1.0f / 3.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,  // ties to even for half
      1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,                 // ties to even for bfloat16
      65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, inf, -inf,  // largest half, rounding to inf
      0x1p-24f, 0x1p-25f, 3 * 0x1p-26f, 1e-30f, -0.0f,     // half subnormals and underflow
      3.0e38f, 1.17549435e-38f};
  Tensor host = from_vector(values);
  Tensor device = host.to(cuda_device(0));
  for (DType to : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(to));
    expect_same_elements(host.to(to), device.to(to).cpu());
    expect_same_elements(host.to(DType::Float64).to(to), device.to(DType::Float64).to(to).cpu());
  }
  // Hand-checked: 1/3 is 0x3555 in half and 0x3eab in bfloat16.
  EXPECT_EQ(device.to(DType::Float16).cpu().data<Half>()[0].bits, 0x3555);
  EXPECT_EQ(device.to(DType::BFloat16).cpu().data<BFloat16>()[0].bits, 0x3eab);
}

TEST(Cuda, ConversionsTruncateAndTestNonZeroAsTheCpuDoes) {
  SKIP_WITHOUT_GPU();
  Tensor device = from_vector<double>({2.75, -2.75, 0.0, 0.5}, {4}, cuda_device(0));
  Tensor ints = device.to(DType::Int32).cpu();
  EXPECT_EQ(ints.at<int32_t>({0}), 2);
  EXPECT_EQ(ints.at<int32_t>({1}), -2);
  Tensor bools = device.to(DType::Bool).cpu();
  EXPECT_TRUE(bools.at<bool>({0}));
  EXPECT_FALSE(bools.at<bool>({2}));
  EXPECT_TRUE(bools.at<bool>({3}));
  Tensor back = from_vector<bool>({true, false}, {2}, cuda_device(0)).to(DType::Float32).cpu();
  EXPECT_EQ(back.at<float>({0}), 1.0f);
  EXPECT_EQ(back.at<float>({1}), 0.0f);
}

// NaN, out-of-range and negative floats into integers: undefined in C++,
// different in hardware, defined by Kiln (Note [Float to integer
// conversion]); the device must give the CPU's bits.
TEST(Cuda, FloatsOutOfAnIntegersRangeConvertAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<double> values = {-1.0, 300.0, -200.5, std::nan(""), 3e9, -3e9, 1e30, -1e30, 2.9, -2.9};
  for (DType from : {DType::Float32, DType::Float64, DType::Float16}) {
    Tensor source = from_vector<double>(values, {static_cast<int64_t>(values.size())}).to(from);
    for (DType to : {DType::UInt8, DType::Int8, DType::Int32, DType::Int64}) {
      Tensor on_cpu = source.to(to), on_gpu = source.to(cuda_device(0)).to(to).cpu();
      EXPECT_EQ(std::memcmp(on_cpu.data_ptr(), on_gpu.data_ptr(), on_cpu.nbytes()), 0)
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(Cuda, FillWritesEveryDtype) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    for (Scalar value : {Scalar(0), Scalar(1), Scalar(2.5), Scalar(true), Scalar(int64_t{100})}) {
      expect_same_elements(full({3, 70}, value, dtype), full({3, 70}, value, {dtype, cuda_device(0)}).cpu());
    }
  }
  // Hand-checked values, including one only int64 holds exactly.
  Tensor big = full({2}, (int64_t{1} << 53) + 1, {DType::Int64, cuda_device(0)}).cpu();
  EXPECT_EQ(big.at<int64_t>({1}), (int64_t{1} << 53) + 1);
  Tensor half = full({5}, 0.1, {DType::Float16, cuda_device(0)}).cpu();
  EXPECT_EQ(half.data<Half>()[4].bits, 0x2e66);  // 0.1 rounds to 0x2e66 in half
}

TEST(Cuda, FillOfAStridedViewLeavesTheRestAlone) {
  SKIP_WITHOUT_GPU();
  Tensor device = zeros({4, 6}, {DType::Int8, cuda_device(0)});
  backend_for(device.device()).fill(device.t().slice(0, 1, 6, 2), 7);  // columns 1, 3, 5
  Tensor back = device.cpu();
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(back.at<int>({i, j}), j % 2 == 1 ? 7 : 0) << i << ", " << j;
  }
  Tensor scalar = scalar_tensor(-3, {DType::Int32, cuda_device(0)});
  EXPECT_EQ(scalar.item<int32_t>(), -3);
}

TEST(Cuda, EmptyTensorsCopyAndFillAsNoOps) {
  SKIP_WITHOUT_GPU();
  Tensor device = zeros({0, 3}, cuda_device(0));
  EXPECT_EQ(device.numel(), 0);
  EXPECT_EQ(device.cpu().shape(), (Shape{0, 3}));
  EXPECT_EQ(device.to(DType::Int8).shape(), (Shape{0, 3}));
}

TEST(Cuda, OutOfMemoryNamesTheSizeAndDeviceAndLeavesTheDeviceUsable) {
  SKIP_WITHOUT_GPU();
  int64_t huge = int64_t{1} << 50;  // 1 PiB
  expect_error([&] { Tensor::empty({huge}, {DType::UInt8, cuda_device(0)}); },
               "CUDA allocator: out of memory on cuda:0: tried to allocate 1125899906842624 bytes");
  // The failure is not sticky: the next allocation and kernel work.
  expect_same_elements(full({3}, 4, DType::Int32), full({3}, 4, {DType::Int32, cuda_device(0)}).cpu());
}

TEST(Cuda, CopiesBetweenTwoGpus) {
  SKIP_WITHOUT_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, this machine has 1";
  Tensor host = sample({6, 5}, DType::Float32);
  Tensor on0 = host.to(cuda_device(0));
  expect_same_elements(host, on0.to(cuda_device(1)).cpu());                                      // one block
  expect_same_elements(host.t().contiguous(), on0.t().to(cuda_device(1)).cpu());                 // packed first
  expect_same_elements(host.to(DType::Float16), on0.to(DType::Float16, cuda_device(1)).cpu());   // converted
  Tensor dst = zeros({5, 6}, cuda_device(1));
  dst.t().copy_(on0);  // strided destination on the other GPU
  expect_same_elements(host.t().contiguous(), dst.cpu());
}

#endif  // KILN_WITH_CUDA

}  // namespace
}  // namespace kiln
