// Kiln's direct CUDA convolution kernels (Note [Direct CUDA convolution])
// run on the CPU through tests/tensor/cuda_emulation.h (Note [Emulated
// kernels]) against the CPU backend's convolution in float64, each launched
// with the shape conv_direct.cu launches it with: every geometry of the
// CUDA tests and wider ones (padding past the kernel, strides and dilations
// together, more taps than a block has threads, several channel tiles and
// weight-gradient ranges). This checks their index arithmetic on every
// machine; CudaConv2d.DirectKernelsMatchCpuAndCudnn checks them on a GPU.
#include "tests/tensor/cuda_emulation.h"
// After the emulation: its definitions make the kernels C++ (their #pragma
// unroll is nvcc's; tests/CMakeLists.txt quiets g++ about it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tensor/conv.h"
#include "tensor/cuda/conv_direct_kernels.cuh"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

namespace dc = cuda::direct_conv;
using emulation::Dim3;

struct Case {
  int64_t n, c, h, w, oc, kh, kw;
  Conv2dParams p;
};

std::string name_of(const Case& k) {
  return "x(" + std::to_string(k.n) + "," + std::to_string(k.c) + "," + std::to_string(k.h) + "," +
         std::to_string(k.w) + ") oc " + std::to_string(k.oc) + " k" + std::to_string(k.kh) + "x" +
         std::to_string(k.kw) + " stride " + std::to_string(k.p.stride.h) + "," + std::to_string(k.p.stride.w) +
         " pad " + std::to_string(k.p.padding.h) + "," + std::to_string(k.p.padding.w) + " dilation " +
         std::to_string(k.p.dilation.h) + "," + std::to_string(k.p.dilation.w);
}

Conv2dShape shape_of(const Case& k) { return conv2d_shape(k.c, {k.h, k.w}, {k.kh, k.kw}, k.p); }

// Every element within tol * (1 + |expected|) of the float64 reference.
void expect_near_reference(const Tensor& reference, const std::vector<double>& actual, double tol,
                           const std::string& what) {
  ASSERT_EQ(reference.numel(), static_cast<int64_t>(actual.size())) << what;
  const Tensor r = reference.contiguous();
  int reported = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const double e = r.data<double>()[i];
    if (!(std::abs(actual[i] - e) <= tol * (1 + std::abs(e))) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected " << e;
    }
  }
}

template <class T>
std::vector<T> values_as(const Tensor& t) {
  const Tensor c = t.to(DType::Float64).contiguous();
  return std::vector<T>(c.data<double>(), c.data<double>() + c.numel());
}

template <class T>
std::vector<double> widened(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// The four kernels in T on a case, against ops::conv2d and conv2d_backward
// in float64 on the CPU backend.
template <class T>
void check_case(const Case& k, uint64_t seed, double tol) {
  const std::string what = name_of(k) + (sizeof(T) == 4 ? " float32" : " float64");
  const Conv2dShape s = shape_of(k);
  ASSERT_TRUE(cuda::direct_conv_applies(k.oc, k.p, s, sizeof(T) == 4 ? DType::Float32 : DType::Float64)) << what;
  const dc::Geometry32 g32 = dc::geometry32(k.p, s);
  auto random = [&](const Shape& shape) {
    return from_vector(pseudo_random(shape_numel(shape, "random"), -1, 1, seed++), shape).to(DType::Float64);
  };
  // Values exact in T, so that the reference sees what the kernels see.
  const Tensor x = random({k.n, k.c, k.h, k.w}).to(sizeof(T) == 4 ? DType::Float32 : DType::Float64).to(DType::Float64);
  const Tensor w =
      random({k.oc, k.c, k.kh, k.kw}).to(sizeof(T) == 4 ? DType::Float32 : DType::Float64).to(DType::Float64);
  const Tensor b = random({k.oc}).to(sizeof(T) == 4 ? DType::Float32 : DType::Float64).to(DType::Float64);
  const Tensor y = ops::conv2d(x, w, b, k.p);
  const Tensor dy = random(y.shape()).to(sizeof(T) == 4 ? DType::Float32 : DType::Float64).to(DType::Float64);
  const ops::Conv2dGrads expected = ops::conv2d_backward(dy, x, w, k.p, {true, true, true});

  const std::vector<T> xs = values_as<T>(x), ws = values_as<T>(w), bs = values_as<T>(b), dys = values_as<T>(dy);
  const int oc = static_cast<int>(k.oc);

  // The launcher direct_conv's run_* functions are given: the emulation.
  auto launch = [](auto kernel, const dc::LaunchShape& shape, auto... args) {
    emulation::launch(Dim3{shape.grid_x, shape.grid_y, shape.grid_z}, shape.threads, shape.shared_bytes, kernel,
                      args...);
  };

  std::vector<T> out(y.numel(), T(-999));
  dc::run_forward<T>(launch, out.data(), xs.data(), ws.data(), bs.data(), g32, oc, k.n);
  expect_near_reference(y, widened(out), tol, what + " forward");

  std::vector<T> dx(x.numel(), T(-999));
  dc::run_grad_input<T>(launch, dx.data(), dys.data(), ws.data(), g32, oc, k.n);
  expect_near_reference(expected.grad_input, widened(dx), tol, what + " grad_input");

  for (bool with_bias : {true, false}) {
    // The plan conv_direct.cu would run, and one split finer (a few images
    // or rows a range, the last range short), so that both kernels' ranges
    // and the sums of their partial results run on these small shapes.
    const dc::WeightPlan plan = dc::grad_weight_plan(g32, k.n, k.oc, with_bias);
    dc::WeightPlan split = plan;
    if (plan.lanes) {
      split.range_images = 2;
      split.ranges = (k.n + 1) / 2;
    } else {
      split.range_rows = 3;
      split.ranges = (plan.rows + 2) / 3;
    }
    split.partial.grid_x = static_cast<unsigned>(split.ranges);
    for (const dc::WeightPlan& p : {plan, split}) {
      std::vector<T> dw(w.numel(), T(-999)), db(k.oc, T(-999));
      std::vector<double> partial(p.ranges > 1 ? p.entries * p.ranges : 0, -777.0);
      dc::run_grad_weight<T>(launch, p, dw.data(), with_bias ? db.data() : nullptr,
                             p.ranges > 1 ? partial.data() : nullptr, dys.data(), xs.data(), g32, oc, k.n);
      const std::string how = what + (with_bias ? " with the bias, " : " alone, ") +
                              (p.lanes ? "lanes kernel, " : "rows kernel, ") + std::to_string(p.ranges) + " ranges";
      expect_near_reference(expected.grad_weight, widened(dw), tol, how + ": grad_weight");
      if (with_bias) {
        expect_near_reference(expected.grad_bias, widened(db), tol, how + ": grad_bias");
      } else {
        EXPECT_TRUE(std::all_of(db.begin(), db.end(), [](T v) { return v == T(-999); })) << how << " wrote a bias";
      }
    }
  }
}

const Case kCases[] = {
    {2, 3, 8, 8, 4, 3, 3, {}},
    {3, 1, 28, 28, 6, 5, 5, {.padding = 2}},
    {2, 4, 9, 7, 6, 3, 2, {.stride = {2, 3}, .padding = {1, 0}}},
    {1, 3, 11, 12, 2, 3, 3, {.padding = {2, 1}, .dilation = {2, 3}}},
    {4, 2, 5, 5, 3, 1, 1, {}},
    {2, 3, 32, 32, 6, 5, 5, {}},   // LeNet's conv1: planes of several blocks
    {3, 6, 14, 14, 16, 5, 5, {}},  // LeNet's conv2: two output-channel groups
    {2, 5, 20, 19, 7, 4, 3, {.stride = {3, 2}, .padding = {2, 1}, .dilation = {2, 1}}},
    {3, 2, 9, 23, 3, 3, 5, {.stride = {2, 3}, .padding = {4, 5}, .dilation = {1, 2}}},  // pad > kernel
    {9, 3, 12, 12, 5, 3, 3, {.padding = 1}},  // several images a weight-gradient range
    {2, 12, 9, 9, 3, 5, 4, {.padding = 1}},   // 240 taps and a bias: more than a block's threads
};

TEST(CudaDirectConvEmulated, KernelsMatchTheCpuBackendInFloat32AndFloat64) {
  uint64_t seed = 1;
  for (const Case& k : kCases) {
    check_case<float>(k, seed, 1e-4);
    check_case<double>(k, seed, 1e-10);
    seed += 10;
  }
}

TEST(CudaDirectConvEmulated, LaunchShapesFollowTheShapesOnly) {
  // LeNet's conv1 at batch 64: planes of 784 positions in 4 blocks of 256,
  // 6 output channels in one tile of 8.
  const Conv2dParams unit;
  const dc::Geometry32 g32 = dc::geometry32(unit, conv2d_shape(3, {32, 32}, 5, unit));
  const dc::LaunchShape f = dc::forward_shape(g32, 64, 6, 4);
  EXPECT_EQ(f.threads, 256u);
  EXPECT_EQ(f.grid_x, 4u);
  EXPECT_EQ(f.grid_y, 64u);
  EXPECT_EQ(f.grid_z, 1u);
  EXPECT_EQ(f.shared_bytes, 75u * 8 * 4);
  // Its weight gradient by the lanes kernel: a warp for each of the 3 * 5
  // (channel, kernel row) pairs and one for the bias, 16 in all; an image per
  // range at batch 64 (64 * 16 warps is about half of 2048), four at 512.
  const dc::WeightPlan p = dc::grad_weight_plan(g32, 64, 6, true);
  EXPECT_TRUE(p.lanes);
  EXPECT_EQ(p.range_images, 1);
  EXPECT_EQ(p.ranges, 64);
  EXPECT_EQ(p.entries, 6 * 75 + 6);
  EXPECT_EQ(p.partial.grid_y, 4u);  // 16 warps in blocks of 4
  EXPECT_EQ(dc::grad_weight_plan(g32, 512, 6, true).range_images, 4);
  // LeNet's conv2: 16 output channels in two groups of 8, 62 warps.
  const dc::Geometry32 g2 = dc::geometry32(unit, conv2d_shape(6, {14, 14}, 5, unit));
  EXPECT_EQ(dc::grad_weight_plan(g2, 64, 16, true).range_images, 2);
  EXPECT_EQ(dc::grad_weight_plan(g2, 512, 16, true).range_images, 16);
  // Other kernel widths: the rows kernel, in ranges of whole rows of at
  // least 256 positions, about 2048 blocks in all.
  const dc::Geometry32 g4 = dc::geometry32(unit, conv2d_shape(3, {32, 32}, 4, unit));
  const dc::WeightPlan rows = dc::grad_weight_plan(g4, 64, 6, true);
  EXPECT_FALSE(rows.lanes);
  EXPECT_EQ(rows.range_rows, 9);         // ceil(256 / 29) rows, more than ceil(64 * 29 / 341)
  EXPECT_EQ(rows.partial.threads, 64u);  // 48 taps and the bias, in whole warps
  // A plane smaller than a block gets whole warps only.
  EXPECT_EQ(dc::plane_threads(100), 128u);
  // Batches past CUDA's grid-y limit loop inside the kernel.
  EXPECT_EQ(dc::forward_shape(g32, 100000, 6, 4).grid_y, 65535u);
}

}  // namespace
}  // namespace kiln
