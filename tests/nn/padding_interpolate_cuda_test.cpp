// F::pad, F::interpolate and their layers on CUDA against the CPU: the
// same float64 and float32 inputs and upstream gradients on both devices,
// outputs and input gradients compared. Both are gathers with indices
// computed on the host (Note [Padding and interpolation as gathers]), so
// the float64 values agree to rounding. Compiled in every build; each test
// skips without a GPU.
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "kiln.h"
#include "nn/nn_test_util.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using autograd::TensorList;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda::unavailable_reason()

// Uniform in [-1, 1) from `seed`, the same on every device.
Tensor uniform(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  Tensor t = rand(shape, DType::Float64, &gen);
  return ops::sub(ops::mul(t, 2.0), 1.0).to(dtype);
}

void expect_close(const Tensor& cpu, const Tensor& gpu, double tol, const std::string& what) {
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  EXPECT_EQ(gpu.device(), cuda_device(0)) << what;
  std::vector<double> a = testing::values_of(cpu), b = testing::values_of(gpu);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol * (1 + std::abs(a[i]))) << what << " element " << i;
}

// Runs fn on the CPU and on the GPU with the same input and upstream
// gradient, in float64 and float32, and compares output and gradient. The
// layers have no parameters, so the same module serves both devices.
void expect_cuda_matches_cpu(const std::string& name, const std::function<Tensor(const Tensor&)>& fn,
                             const Shape& shape) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
    const std::string what = name + (dtype == DType::Float64 ? " (float64)" : " (float32)");
    Tensor x = uniform(shape, 7, dtype);
    Tensor x_cpu = x.clone().requires_grad_(), x_gpu = x.to(cuda_device(0)).requires_grad_();
    Tensor y_cpu = fn(x_cpu), y_gpu = fn(x_gpu);
    expect_close(y_cpu, y_gpu, tol, what + " output");
    Tensor g = uniform(y_cpu.shape(), 8, dtype);
    sum(mul(y_cpu, g)).backward();
    sum(mul(y_gpu, g.to(cuda_device(0)))).backward();
    expect_close(x_cpu.grad(), x_gpu.grad(), tol, what + " gradient");
  }
}

TEST(PadCuda, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  using F::PadMode;
  expect_cuda_matches_cpu("constant",
                          [](const Tensor& x) {
                            return F::pad(x, {1, -1, 2, 0, 0, 3}, PadMode::Constant, 0.5);
                          },
                          {2, 3, 4, 5});
  expect_cuda_matches_cpu("reflect 2-d",
                          [](const Tensor& x) {
                            return F::pad(x, {2, 1, 3, 0}, PadMode::Reflect);
                          },
                          {2, 3, 4, 5});
  expect_cuda_matches_cpu("reflect 3-d",
                          [](const Tensor& x) {
                            return F::pad(x, {1, 2, 0, 1, 2, 1}, PadMode::Reflect);
                          },
                          {1, 2, 3, 4, 5});
  expect_cuda_matches_cpu("replicate 1-d",
                          [](const Tensor& x) {
                            return F::pad(x, {-1, 4}, PadMode::Replicate);
                          },
                          {2, 3, 6});
  expect_cuda_matches_cpu("circular 2-d",
                          [](const Tensor& x) {
                            return F::pad(x, {2, 3, 1, -1}, PadMode::Circular);
                          },
                          {2, 2, 4, 5});
  expect_cuda_matches_cpu("ReflectionPad2d layer",
                          [](const Tensor& x) {
                            auto layer = std::make_shared<ReflectionPad2d>(2);
                                                    return (*layer)(x);
                          },
                          {2, 3, 4, 4});
}

TEST(InterpolateCuda, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  using F::InterpolateMode;
  expect_cuda_matches_cpu("nearest 2-d",
                          [](const Tensor& x) {
                            return F::interpolate(x, {.scale_factor = {1.7, 0.6}});
                          },
                          {2, 3, 5, 7});
  expect_cuda_matches_cpu("nearest-exact 3-d",
                          [](const Tensor& x) {
                            return F::interpolate(x, {.size = {3, 5, 2}, .mode = InterpolateMode::NearestExact});
                          },
                          {1, 2, 2, 3, 4});
  expect_cuda_matches_cpu("linear",
                          [](const Tensor& x) {
                            return F::interpolate(
                                x, {.size = {9}, .mode = InterpolateMode::Linear, .align_corners = true});
                          },
                          {2, 3, 4});
  expect_cuda_matches_cpu("bilinear",
                          [](const Tensor& x) {
                            return F::interpolate(x, {.size = {7, 3}, .mode = InterpolateMode::Bilinear});
                          },
                          {2, 3, 4, 5});
  expect_cuda_matches_cpu("UpsamplingBilinear2d layer",
                          [](const Tensor& x) {
                            auto layer = std::make_shared<UpsamplingBilinear2d>(UpsamplingSize{.scale_factor = {1.5}});
                                                    return (*layer)(x);
                          },
                          {2, 2, 3, 5});
}

// Antialiasing is the same gathers with more taps (Note [Antialiased
// interpolation] in nn/functional/interpolate.cpp), so no kernel of its own.
TEST(InterpolateCuda, AntialiasMatchesCpu) {
  SKIP_WITHOUT_GPU();
  using F::InterpolateMode;
  expect_cuda_matches_cpu("bilinear antialias",
                          [](const Tensor& x) {
                            return F::interpolate(
                                x, {.size = {4, 3}, .mode = InterpolateMode::Bilinear, .antialias = true});
                          },
                          {2, 3, 11, 9});
  expect_cuda_matches_cpu("bicubic antialias",
                          [](const Tensor& x) {
                            return F::interpolate(
                                x, {.scale_factor = {0.4}, .mode = InterpolateMode::Bicubic, .antialias = true});
                          },
                          {1, 2, 10, 12});
}

TEST(InterpolateCuda, BicubicTrilinearAreaMatchCpu) {
  SKIP_WITHOUT_GPU();
  using F::InterpolateMode;
  expect_cuda_matches_cpu("bicubic",
                          [](const Tensor& x) {
                            return F::interpolate(x, {.size = {9, 4}, .mode = InterpolateMode::Bicubic});
                          },
                          {2, 3, 5, 7});
  expect_cuda_matches_cpu("bicubic align_corners",
                          [](const Tensor& x) {
                            return F::interpolate(
                                x, {.scale_factor = {1.5}, .mode = InterpolateMode::Bicubic, .align_corners = true});
                          },
                          {1, 2, 4, 3});
  expect_cuda_matches_cpu("trilinear",
                          [](const Tensor& x) {
                            return F::interpolate(x, {.size = {3, 5, 2}, .mode = InterpolateMode::Trilinear});
                          },
                          {1, 2, 2, 3, 4});
  expect_cuda_matches_cpu(
      "area 1-d", [](const Tensor& x) { return F::interpolate(x, {.size = {4}, .mode = InterpolateMode::Area}); },
      {2, 3, 9});
  expect_cuda_matches_cpu("area 3-d",
                          [](const Tensor& x) {
                            return F::interpolate(x, {.size = {2, 3, 2}, .mode = InterpolateMode::Area});
                          },
                          {1, 2, 5, 7, 4});
}

}  // namespace
}  // namespace kiln::nn
