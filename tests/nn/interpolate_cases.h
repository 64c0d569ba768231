// The interpolate tests' shared cases (interpolate_test.cpp and
// interpolate_modes_test.cpp): a resize's values, and one call of
// F::interpolate against torch's, in float64 or in float32.
#pragma once

#include <string>
#include <vector>

#include "nn/functional.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"
#include "autograd/autograd_test_util.h"

namespace kiln::nn::testing {

inline std::vector<double> resized(const Tensor& x, const functional::InterpolateOptions& options) {
  return values_of(functional::interpolate(x, options));
}

// F::interpolate(x, options) against F.interpolate(x, torch_args).
inline OracleCase functional_case(const std::string& name, Tensor x, const functional::InterpolateOptions& options,
                                  const std::string& torch_args) {
  return {.name = name,
          .inputs = {x},
          .python = "outs = [F.interpolate(in0, " + torch_args + ")]",
          .kiln = [options](const TensorList& in) { return TensorList{functional::interpolate(in[0], options)}; }};
}

// Kiln in float32 against torch in float32, on the same float32 values.
// The tolerance is for the gradients, float32 sums in another order; an
// element picked wrongly would be off by far more.
inline OracleCase float32_case(const std::string& name, const Shape& shape, uint64_t seed,
                               const functional::InterpolateOptions& options, const std::string& torch_args) {
  return {.name = name + ", float32",
          .inputs = {gradtest::uniform64(shape, seed).to(DType::Float32).requires_grad_()},
          .python = "outs = [F.interpolate(in0.float(), " + torch_args + ")]",
          .kiln =
              [options](const TensorList& in) {
                Tensor y = functional::interpolate(in[0], options);
                EXPECT_EQ(y.dtype(), DType::Float32);
                return TensorList{y};
              },
          .rtol = 1e-5,
          .atol = 1e-6};
}

}  // namespace kiln::nn::testing
