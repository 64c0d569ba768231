// CUDA cumsum and cumprod against the CPU, for the integer and float
// dtypes, along the last dim (the block-per-row kernel, rows longer than
// one chunk included) and the others (the thread-per-column kernel), and
// from both ends.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <string>

#include "tests/tensor/cuda_test_util.h"

namespace kiln {
namespace {

using namespace backend_compare;

TEST(CudaScan, MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{4, 3000}, 1}, {{3000}, 0}, {{7, 33, 5}, 1}, {{7, 33, 5}, 0}, {{2, 3, 1025}, -1}, {{1, 1}, 0}};
  for (DType dtype : {DType::Int32, DType::Int64, DType::Float16, DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      for (bool product : {false, true}) {
        const std::string what = std::string(dtype_name(dtype)) + (product ? " cumprod" : " cumsum") + " dim " +
                                 std::to_string(c.dim) + " of " + testing::PrintToString(c.shape);
        // Products stay finite and away from zero on values near 1.
        Tensor x = product ? ops::add(ops::mul(random_tensor(c.shape, DType::Float64, 1), 0.001), 1.0).to(dtype)
                           : random_tensor(c.shape, dtype, 2);
        Tensor want = product ? ops::cumprod(x, c.dim) : ops::cumsum(x, c.dim);
        Tensor got = product ? ops::cumprod(x.to(gpu()), c.dim) : ops::cumsum(x.to(gpu()), c.dim);
        // The GPU accumulates floats in float32, the CPU in float64; a
        // float16 result may then round to the neighbouring value.
        const double rtol = dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 1e-5 : 1e-2;
        const double atol = dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 1e-3 : 0.25;
        expect_matches(want, got, what, rtol, atol);
      }
      Tensor x = random_tensor(c.shape, dtype, 3);
      expect_matches(ops::reverse_cumsum(x, c.dim), ops::reverse_cumsum(x.to(gpu()), c.dim),
                     std::string(dtype_name(dtype)) + " reverse_cumsum", dtype == DType::Float64 ? 1e-12 : 1e-2,
                     dtype == DType::Float64 ? 1e-12 : 0.25);
    }
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
