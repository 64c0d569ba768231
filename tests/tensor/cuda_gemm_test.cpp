// CudaBackend::gemm against the CPU backend's: every dtype, transposed,
// strided and batch-broadcast operands, alpha/beta, TF32 on and off.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/settings.h"
#include "tests/tensor/cuda_compare.h"

namespace kiln {
namespace {

using namespace kiln::ops;
using namespace kiln::cuda_compare;

constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// c = alpha * a @ b + beta * c on both backends from the same CPU inputs
// (any views), compared element by element; c's layout on the device
// mirrors the CPU one (same shape, strides and offset into a same-sized buffer).
void expect_gemm_matches(const Tensor& c_cpu, const Tensor& a_cpu, const Tensor& b_cpu, double alpha, double beta,
                         double rtol, const std::string& what) {
  auto to_device = [](const Tensor& t) {
    // The same view over a device copy of t's whole storage.
    const size_t nbytes = t.storage()->nbytes();
    Tensor base = Tensor::empty({static_cast<int64_t>(nbytes / t.element_size())}, {t.dtype(), kCPU});
    if (nbytes > 0) std::memcpy(base.data_ptr(), t.storage()->data(), nbytes);
    return base.to(cuda_device(0)).as_strided(t.shape(), t.strides(), t.storage_offset());
  };
  Tensor a = to_device(a_cpu), b = to_device(b_cpu), c = to_device(c_cpu);
  Tensor expected = c_cpu.clone();
  Tensor expected_view = expected;
  backend_for(kCPU).gemm(expected_view, a_cpu, b_cpu, alpha, beta);
  cuda::backend().gemm(c, a, b, alpha, beta);
  const double k = static_cast<double>(a_cpu.size(2));
  expect_close(expected, c, rtol, rtol * (k + 1), what);
}

TEST(CudaGemm, MatchesCpuForEveryFloatDtypeAndShape) {
  SKIP_WITHOUT_GPU();
  const int64_t shapes[][4] = {{1, 1, 1, 1}, {1, 7, 5, 3}, {3, 17, 33, 9}, {2, 64, 128, 96}, {1, 1, 300, 1},
                               {4, 130, 1, 70}};
  uint64_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (const auto& s : shapes) {
      Tensor a = random_tensor({s[0], s[1], s[2]}, dtype, seed++);
      Tensor b = random_tensor({s[0], s[2], s[3]}, dtype, seed++);
      Tensor c = random_tensor({s[0], s[1], s[3]}, dtype, seed++);
      const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(s[1]) + "x" +
                               std::to_string(s[2]) + "x" + std::to_string(s[3]);
      expect_gemm_matches(c, a, b, 1.0, 0.0, tolerance_for(dtype), what);
      expect_gemm_matches(c, a, b, -0.5, 2.0, tolerance_for(dtype), what + " alpha/beta");
    }
  }
}

TEST(CudaGemm, TransposedAndStridedOperandsAndOutputs) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const double tol = tolerance_for(dtype);
    // a^T and b^T read in place (transpose flags), in both frames of c.
    Tensor at = random_tensor({2, 11, 6}, dtype, 10).transpose(1, 2);  // (2, 6, 11), unit row stride
    Tensor bt = random_tensor({2, 9, 11}, dtype, 11).transpose(1, 2);  // (2, 11, 9)
    Tensor c = random_tensor({2, 6, 9}, dtype, 12);
    Tensor ct = random_tensor({2, 9, 6}, dtype, 13).transpose(1, 2);  // column-major c
    expect_gemm_matches(c, at, bt, 1.0, 0.0, tol, "transposed a, b");
    expect_gemm_matches(ct, at, bt, 1.5, 0.5, tol, "transposed a, b, c");
    // Neither matrix dim has unit stride: copied first. c likewise.
    Tensor as = random_tensor({2, 12, 22}, dtype, 14).slice(1, 0, 12, 2).slice(2, 0, 22, 2);  // (2, 6, 11)
    Tensor bs = random_tensor({2, 22, 27}, dtype, 15).slice(1, 0, 22, 2).slice(2, 0, 27, 3);  // (2, 11, 9)
    Tensor cs = random_tensor({2, 12, 18}, dtype, 16).slice(1, 0, 12, 2).slice(2, 0, 18, 2);  // (2, 6, 9)
    expect_gemm_matches(cs, as, bs, 1.0, 0.0, tol, "strided a, b, c");
    expect_gemm_matches(cs, as, bs, 2.0, -1.0, tol, "strided a, b, c with beta");
    // A batch dim that is not outermost in memory.
    Tensor ap = random_tensor({6, 3, 11}, dtype, 17).permute({1, 0, 2});  // (3, 6, 11)
    Tensor bp = random_tensor({11, 3, 9}, dtype, 18).permute({1, 0, 2});  // (3, 11, 9)
    expect_gemm_matches(random_tensor({3, 6, 9}, dtype, 19), ap, bp, 1.0, 0.0, tol, "permuted batch");
  }
}

TEST(CudaGemm, BroadcastBatchOperand) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes) {
    Tensor a = random_tensor({1, 5, 8}, dtype, 20).expand({4, 5, 8});  // batch stride 0
    Tensor b = random_tensor({4, 8, 3}, dtype, 21);
    expect_gemm_matches(random_tensor({4, 5, 3}, dtype, 22), a, b, 1.0, 0.0, tolerance_for(dtype), "broadcast a");
    Tensor b0 = random_tensor({1, 8, 3}, dtype, 23).expand({4, 8, 3});
    expect_gemm_matches(random_tensor({4, 5, 3}, dtype, 24), random_tensor({4, 5, 8}, dtype, 25), b0, 1.0, 1.0,
                        tolerance_for(dtype), "broadcast b");
  }
}

TEST(CudaGemm, BetaZeroIgnoresNaNInOutput) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes) {
    Tensor c = full({2, 4, 3}, std::numeric_limits<double>::quiet_NaN(), dtype);
    Tensor a = random_tensor({2, 4, 5}, dtype, 30), b = random_tensor({2, 5, 3}, dtype, 31);
    expect_gemm_matches(c, a, b, 1.0, 0.0, tolerance_for(dtype), "NaN c, beta 0");
    Tensor cs = full({2, 8, 3}, std::numeric_limits<double>::quiet_NaN(), dtype).slice(1, 0, 8, 2);
    expect_gemm_matches(cs, a, b, 1.0, 0.0, tolerance_for(dtype), "NaN strided c, beta 0");
  }
}

TEST(CudaGemm, IntegerAndBoolMatchCpuExactly) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::Int32, DType::Int64, DType::Int8, DType::UInt8, DType::Bool}) {
    Tensor a = random_tensor({2, 5, 7}, DType::Float64, 40, 0, 4).to(dtype);
    Tensor b = random_tensor({2, 7, 3}, DType::Float64, 41, 0, 4).to(dtype).transpose(1, 2).contiguous().transpose(1, 2);
    Tensor c = random_tensor({2, 5, 3}, DType::Float64, 42, 0, 4).to(dtype);
    expect_gemm_matches(c, a, b, 1.0, 0.0, 0.0, std::string(dtype_name(dtype)));
    expect_gemm_matches(c, a, b, 2.0, 1.0, 0.0, std::string(dtype_name(dtype)) + " alpha/beta");
  }
}

TEST(CudaGemm, EmptyInnerDimensionScalesC) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : kFloatDTypes) {
    Tensor a = Tensor::empty({2, 3, 0}, dtype), b = Tensor::empty({2, 0, 4}, dtype);
    expect_gemm_matches(random_tensor({2, 3, 4}, dtype, 50), a, b, 1.0, 0.0, 0.0, "K = 0, beta 0");
    expect_gemm_matches(random_tensor({2, 3, 4}, dtype, 51), a, b, 1.0, 0.5, 0.0, "K = 0, beta 0.5");
  }
  // Empty outputs are no-ops.
  Tensor c = Tensor::empty({0, 3, 4}, {DType::Float32, cuda_device(0)});
  cuda::backend().gemm(c, Tensor::empty({0, 3, 2}, {DType::Float32, cuda_device(0)}),
                       Tensor::empty({0, 2, 4}, {DType::Float32, cuda_device(0)}), 1.0, 0.0);
}

TEST(CudaGemm, MatmulThroughTheFrontEnd) {
  SKIP_WITHOUT_GPU();
  Tensor a = random_tensor({3, 16, 24}, DType::Float32, 60), b = random_tensor({24, 8}, DType::Float32, 61);
  expect_close(matmul(a, b), matmul(a.to(cuda_device(0)), b.to(cuda_device(0))), 1e-5, 1e-4, "matmul");
  Tensor w = random_tensor({8, 24}, DType::Float32, 62), bias = random_tensor({8}, DType::Float32, 63);
  expect_close(linear(a, w, bias), linear(a.to(cuda_device(0)), w.to(cuda_device(0)), bias.to(cuda_device(0))),
               1e-5, 1e-4, "linear");
}

TEST(CudaGemm, Tf32IsOffByDefaultAndCanBeAllowed) {
  EXPECT_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
  SKIP_WITHOUT_GPU();
  Tensor a = random_tensor({1, 128, 256}, DType::Float32, 70), b = random_tensor({1, 256, 64}, DType::Float32, 71);
  Tensor c = Tensor::empty({1, 128, 64}, DType::Float32);
  // float32 without TF32 agrees with the CPU to float32 precision.
  expect_gemm_matches(c, a, b, 1.0, 0.0, 1e-5, "tf32 off");
  cuda::set_allow_tf32(true);
  // TF32 keeps 10 mantissa bits: about 1e-3 relative per product.
  expect_gemm_matches(c, a, b, 1.0, 0.0, 2e-3, "tf32 on");
  cuda::set_allow_tf32(false);
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
