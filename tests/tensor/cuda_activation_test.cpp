// The CUDA activation kernels (tensor/cuda/activation.cu) against the CPU's
// on identical inputs: elu (out of place and in place), its gradient from
// the input and from the output, and hardtanh's gradient with values on and
// beside the bounds, in every floating dtype, contiguous, strided and with
// a broadcast gradient.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <string>

#include "tests/tensor/cuda_test_util.h"

namespace kiln {
namespace {

using namespace backend_compare;

// Random values in [-3, 3) with some set exactly on 0, the bounds -1 and 1
// used below, and NaN.
Tensor activation_input(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor x = random_tensor(shape, DType::Float64, seed);
  set_flat(x, 0, 0.0);
  set_flat(x, 1, -1.0);
  set_flat(x, 2, 1.0);
  set_flat(x, 3, std::numeric_limits<double>::quiet_NaN());
  set_flat(x, 4, -40.0);
  return x.to(dtype);
}

TEST(CudaActivation, MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const View views[] = {identity_view, [](const Tensor& t) { return t.transpose(0, 1); },
                        [](const Tensor& t) { return t.slice(1, 0, t.size(1), 2); }};
  for (DType dtype : kFloatDTypes) {
    const double rtol = tolerance_for(dtype);
    for (int v = 0; v < 3; ++v) {
      const std::string what = std::string(dtype_name(dtype)) + " view " + std::to_string(v);
      Tensor x = views[v](activation_input({33, 70}, dtype, 1));
      Tensor g = views[v](random_tensor({33, 70}, dtype, 2));
      Tensor xg = x.to(gpu()), gg = g.to(gpu());
      for (double alpha : {1.0, 0.4, 0.0}) {
        Tensor y = ops::elu(x, alpha);
        expect_matches(y, ops::elu(xg, alpha), what + " elu", rtol, 1e-30);
        Tensor written = xg.clone();
        ops::elu_(written, alpha);
        expect_matches(y, written, what + " elu_", rtol, 1e-30);
        expect_matches(ops::elu_backward(g, x, alpha, false), ops::elu_backward(gg, xg, alpha, false),
                       what + " elu_backward", rtol, 1e-30);
        expect_matches(ops::elu_backward(g, y, alpha, true), ops::elu_backward(gg, y.to(gpu()), alpha, true),
                       what + " elu_backward from the output", rtol, 1e-30);
      }
      // The bounds are exact in every dtype, so the masks agree exactly.
      expect_matches(ops::hardtanh_backward(g, x, -1.0, 1.0), ops::hardtanh_backward(gg, xg, -1.0, 1.0),
                     what + " hardtanh_backward", 0);
      Tensor y = ops::hardtanh(x, 0.0, 1.0);
      expect_matches(y, ops::hardtanh(xg, 0.0, 1.0), what + " hardtanh", 0);
      expect_matches(ops::hardtanh_backward(g, y, 0.0, 1.0), ops::hardtanh_backward(gg, y.to(gpu()), 0.0, 1.0),
                     what + " hardtanh_backward from the output", 0);
    }
    // A gradient broadcast from one value (the strided launcher's stride 0).
    Tensor x = activation_input({5, 9}, dtype, 3);
    Tensor g = random_tensor({1}, dtype, 4);
    expect_matches(ops::elu_backward(g, x, 0.7, false), ops::elu_backward(g.to(gpu()), x.to(gpu()), 0.7, false),
                   std::string(dtype_name(dtype)) + " broadcast elu_backward", rtol, 1e-30);
    expect_matches(ops::hardtanh_backward(g, x, -0.5, 2.0), ops::hardtanh_backward(g.to(gpu()), x.to(gpu()), -0.5, 2.0),
                   std::string(dtype_name(dtype)) + " broadcast hardtanh_backward", 0);
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
