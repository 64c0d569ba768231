// CUDA batch norm and layer norm kernels against the CPU backend's, called
// through the Backend interface with the tensors the front-end
// (tensor/norm.cpp) would pass: every float dtype, shapes with S = 1 and
// long planes, data with a large mean, empty inputs, and run-to-run
// determinism.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <cstring>
#include <string>

#include "tensor/cuda/cuda_backend.h"
#include "tests/tensor/cuda_compare.h"

namespace kiln {
namespace {

using namespace kiln::ops;
using namespace kiln::cuda_compare;

constexpr DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

DType stats_dtype(DType dtype) { return dtype == DType::Float64 ? DType::Float64 : DType::Float32; }

Tensor on_gpu(const Tensor& t) { return t.to(cuda_device(0)); }

// Stats-type tolerance: float32 stats agree to float32 rounding, float64 tightly.
double stats_tol(DType dtype) { return dtype == DType::Float64 ? 1e-12 : 1e-5; }

std::string name_of(DType dtype, const Shape& shape) {
  std::string s = std::string(dtype_name(dtype)) + " (";
  for (int64_t d : shape) s += std::to_string(d) + ",";
  return s + ")";
}

const Shape kBatchShapes[] = {{4, 3, 1}, {2, 5, 7}, {8, 4, 1000}, {1, 2, 70000}, {300, 2, 3}};

TEST(CudaBatchNorm, StatsAndApplyMatchCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    const DType stat = stats_dtype(dtype);
    for (const Shape& shape : kBatchShapes) {
      const std::string what = name_of(dtype, shape);
      Tensor x = random_tensor(shape, dtype, seed++, -2, 3);
      const int64_t c = shape[1];
      Tensor mean = Tensor::empty({c}, stat), var = Tensor::empty({c}, stat);
      backend_for(kCPU).batch_norm_stats(mean, var, x);
      Tensor mean_gpu = Tensor::empty({c}, {stat, cuda_device(0)}), var_gpu = Tensor::empty({c}, {stat, cuda_device(0)});
      cuda::backend().batch_norm_stats(mean_gpu, var_gpu, on_gpu(x));
      expect_close(mean, mean_gpu, stats_tol(dtype), stats_tol(dtype), what + " mean");
      expect_close(var, var_gpu, stats_tol(dtype), stats_tol(dtype), what + " var");

      Tensor scale = random_tensor({c}, stat, seed++, 0.5, 2), shift = random_tensor({c}, stat, seed++);
      Tensor out = Tensor::empty(shape, dtype), out_gpu = Tensor::empty(shape, {dtype, cuda_device(0)});
      backend_for(kCPU).batch_norm_apply(out, x, mean, scale, shift);
      cuda::backend().batch_norm_apply(out_gpu, on_gpu(x), on_gpu(mean), on_gpu(scale), on_gpu(shift));
      const double tol = dtype == DType::Float32 || dtype == DType::Float64 ? stats_tol(dtype) : tolerance_for(dtype);
      expect_close(out, out_gpu, tol, tol, what + " apply");
    }
  }
}

TEST(CudaBatchNorm, LargeMeanKeepsVarianceDigits) {
  SKIP_WITHOUT_GPU();
  // 1e4 +- 1: E[x^2] - E[x]^2 in float32 would lose every digit.
  Tensor x = random_tensor({16, 3, 500}, DType::Float32, 7, 1e4 - 1, 1e4 + 1);
  Tensor x64 = x.to(DType::Float64);
  Tensor mean64 = Tensor::empty({3}, DType::Float64), var64 = Tensor::empty({3}, DType::Float64);
  backend_for(kCPU).batch_norm_stats(mean64, var64, x64);
  Tensor mean_gpu = Tensor::empty({3}, {DType::Float32, cuda_device(0)});
  Tensor var_gpu = Tensor::empty({3}, {DType::Float32, cuda_device(0)});
  cuda::backend().batch_norm_stats(mean_gpu, var_gpu, on_gpu(x));
  expect_close(mean64, mean_gpu, 1e-6, 0, "mean");
  expect_close(var64, var_gpu, 1e-4, 0, "var");  // var ~ 1/3
}

TEST(CudaBatchNorm, BackwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    const DType stat = stats_dtype(dtype);
    for (const Shape& shape : kBatchShapes) {
      const std::string what = name_of(dtype, shape);
      const int64_t c = shape[1];
      Tensor x = random_tensor(shape, dtype, seed++), dy = random_tensor(shape, dtype, seed++);
      Tensor mean = random_tensor({c}, stat, seed++, -0.1, 0.1);
      Tensor sum_dy = Tensor::empty({c}, stat), sum_dy_xmu = Tensor::empty({c}, stat);
      backend_for(kCPU).batch_norm_backward_reduce(sum_dy, sum_dy_xmu, dy, x, mean);
      Tensor sum_dy_gpu = Tensor::empty({c}, {stat, cuda_device(0)});
      Tensor sum_dy_xmu_gpu = Tensor::empty({c}, {stat, cuda_device(0)});
      cuda::backend().batch_norm_backward_reduce(sum_dy_gpu, sum_dy_xmu_gpu, on_gpu(dy), on_gpu(x), on_gpu(mean));
      // Sums of up to 140000 terms of size ~1: absolute error grows with sqrt(terms).
      const double atol = stats_tol(dtype) * 100;
      expect_close(sum_dy, sum_dy_gpu, stats_tol(dtype), atol, what + " sum_dy");
      expect_close(sum_dy_xmu, sum_dy_xmu_gpu, stats_tol(dtype), atol, what + " sum_dy_xmu");

      Tensor dy_scale = random_tensor({c}, stat, seed++), xmu_scale = random_tensor({c}, stat, seed++);
      Tensor shift = random_tensor({c}, stat, seed++);
      Tensor gx = Tensor::empty(shape, dtype), gx_gpu = Tensor::empty(shape, {dtype, cuda_device(0)});
      backend_for(kCPU).batch_norm_backward_apply(gx, dy, x, mean, dy_scale, xmu_scale, shift);
      cuda::backend().batch_norm_backward_apply(gx_gpu, on_gpu(dy), on_gpu(x), on_gpu(mean), on_gpu(dy_scale),
                                                on_gpu(xmu_scale), on_gpu(shift));
      const double tol = dtype == DType::Float32 || dtype == DType::Float64 ? stats_tol(dtype) : tolerance_for(dtype);
      expect_close(gx, gx_gpu, tol, tol, what + " backward apply");
    }
  }
}

TEST(CudaBatchNorm, EmptyInputGivesZeroGradientSums) {
  SKIP_WITHOUT_GPU();
  Tensor x = Tensor::empty({0, 3, 4}, {DType::Float32, cuda_device(0)});
  Tensor sum_dy = full({3}, 7.0, {DType::Float32, cuda_device(0)});
  Tensor sum_dy_xmu = full({3}, 7.0, {DType::Float32, cuda_device(0)});
  cuda::backend().batch_norm_backward_reduce(sum_dy, sum_dy_xmu, x, x, zeros({3}, {DType::Float32, cuda_device(0)}));
  expect_close(zeros({3}), sum_dy, 0, 0, "sum_dy");
  expect_close(zeros({3}), sum_dy_xmu, 0, 0, "sum_dy_xmu");
}

TEST(CudaBatchNorm, StatsAreTheSameBitsEveryRun) {
  SKIP_WITHOUT_GPU();
  Tensor x = on_gpu(random_tensor({64, 8, 3000}, DType::Float32, 9));
  Tensor first_mean = Tensor::empty({8}, {DType::Float32, cuda_device(0)});
  Tensor first_var = Tensor::empty({8}, {DType::Float32, cuda_device(0)});
  cuda::backend().batch_norm_stats(first_mean, first_var, x);
  for (int run = 0; run < 3; ++run) {
    Tensor mean = Tensor::empty({8}, {DType::Float32, cuda_device(0)}), var = Tensor::empty({8}, {DType::Float32, cuda_device(0)});
    cuda::backend().batch_norm_stats(mean, var, x);
    Tensor a = first_mean.to(kCPU), b = mean.to(kCPU), av = first_var.to(kCPU), bv = var.to(kCPU);
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "mean differs on run " << run;
    EXPECT_EQ(std::memcmp(av.data_ptr(), bv.data_ptr(), av.nbytes()), 0) << "var differs on run " << run;
  }
}

const Shape kLayerShapes[] = {{1, 1}, {5, 3}, {7, 64}, {3, 3000}, {1000, 20}, {2, 70000}};

TEST(CudaLayerNorm, ForwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 200;
  for (DType dtype : kFloatDTypes) {
    const DType stat = stats_dtype(dtype);
    for (const Shape& shape : kLayerShapes) {
      const std::string what = name_of(dtype, shape);
      const int64_t rows = shape[0], k = shape[1];
      Tensor x = random_tensor(shape, dtype, seed++, -1, 2);
      Tensor w = random_tensor({k}, stat, seed++, 0.5, 1.5), b = random_tensor({k}, stat, seed++);
      Tensor out = Tensor::empty(shape, dtype), mean = Tensor::empty({rows}, stat), rstd = Tensor::empty({rows}, stat);
      backend_for(kCPU).layer_norm(out, mean, rstd, x, w, b, 1e-5);
      Tensor out_gpu = Tensor::empty(shape, {dtype, cuda_device(0)});
      Tensor mean_gpu = Tensor::empty({rows}, {stat, cuda_device(0)}), rstd_gpu = Tensor::empty({rows}, {stat, cuda_device(0)});
      cuda::backend().layer_norm(out_gpu, mean_gpu, rstd_gpu, on_gpu(x), on_gpu(w), on_gpu(b), 1e-5);
      expect_close(mean, mean_gpu, stats_tol(dtype), stats_tol(dtype), what + " mean");
      expect_close(rstd, rstd_gpu, stats_tol(dtype), stats_tol(dtype), what + " rstd");
      const double tol = dtype == DType::Float32 || dtype == DType::Float64 ? 1e-5 : tolerance_for(dtype);
      expect_close(out, out_gpu, dtype == DType::Float64 ? 1e-12 : tol, dtype == DType::Float64 ? 1e-12 : tol,
                   what + " out");
    }
  }
}

TEST(CudaLayerNorm, BackwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  for (DType dtype : kFloatDTypes) {
    const DType stat = stats_dtype(dtype);
    for (const Shape& shape : kLayerShapes) {
      const std::string what = name_of(dtype, shape);
      const int64_t rows = shape[0], k = shape[1];
      Tensor x = random_tensor(shape, dtype, seed++), dy = random_tensor(shape, dtype, seed++);
      Tensor w = random_tensor({k}, stat, seed++, 0.5, 1.5);
      Tensor mean = random_tensor({rows}, stat, seed++, -0.1, 0.1), rstd = random_tensor({rows}, stat, seed++, 1, 2);
      Tensor gx = Tensor::empty(shape, dtype), gw = Tensor::empty({k}, stat), gb = Tensor::empty({k}, stat);
      backend_for(kCPU).layer_norm_backward(gx, gw, gb, dy, x, mean, rstd, w);
      Tensor gx_gpu = Tensor::empty(shape, {dtype, cuda_device(0)});
      Tensor gw_gpu = Tensor::empty({k}, {stat, cuda_device(0)}), gb_gpu = Tensor::empty({k}, {stat, cuda_device(0)});
      cuda::backend().layer_norm_backward(gx_gpu, gw_gpu, gb_gpu, on_gpu(dy), on_gpu(x), on_gpu(mean), on_gpu(rstd),
                                          on_gpu(w));
      const double tol = dtype == DType::Float32 || dtype == DType::Float64 ? stats_tol(dtype) * 10
                                                                             : tolerance_for(dtype);
      expect_close(gx, gx_gpu, tol, tol * 10, what + " grad_input");
      expect_close(gw, gw_gpu, stats_tol(dtype), stats_tol(dtype) * 100, what + " grad_weight");
      expect_close(gb, gb_gpu, stats_tol(dtype), stats_tol(dtype) * 100, what + " grad_bias");
      // grad_bias alone.
      Tensor gb_only = Tensor::empty({k}, {stat, cuda_device(0)});
      cuda::backend().layer_norm_backward(Tensor(), Tensor(), gb_only, on_gpu(dy), on_gpu(x), on_gpu(mean),
                                          on_gpu(rstd), on_gpu(w));
      expect_close(gb, gb_only, stats_tol(dtype), stats_tol(dtype) * 100, what + " grad_bias alone");
    }
  }
}

TEST(CudaLayerNorm, ZeroRowsGiveZeroParameterGradients) {
  SKIP_WITHOUT_GPU();
  Tensor x = Tensor::empty({0, 5}, {DType::Float32, cuda_device(0)});
  Tensor none = Tensor::empty({0}, {DType::Float32, cuda_device(0)});
  Tensor gw = full({5}, 3.0, {DType::Float32, cuda_device(0)}), gb = full({5}, 3.0, {DType::Float32, cuda_device(0)});
  cuda::backend().layer_norm_backward(Tensor::empty({0, 5}, {DType::Float32, cuda_device(0)}), gw, gb, x, x, none,
                                      none, ones({5}, {DType::Float32, cuda_device(0)}));
  expect_close(zeros({5}), gw, 0, 0, "grad_weight");
  expect_close(zeros({5}), gb, 0, 0, "grad_bias");
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
