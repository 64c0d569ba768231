// Vectorised float32 kernels of the activations with settings
// (tensor/activation_kernels.h), for tensor/cpu/activation.cpp (Note [SIMD
// dispatch]).
//
// Each processes one run of n elements whose output is contiguous; elu's
// input is contiguous too, a gradient's inputs have step 1 (contiguous) or
// 0 (one value broadcast). They are the
// functions of tensor/cpu/activation_vec.h, instantiated per register width
// in elementwise_avx2.cpp and elementwise_avx512.cpp. Accuracy: elu and its
// derivative use the polynomial e^x of elementwise_vec.h, so they are
// within a few float32 ulps of float64 (tests/tensor/activation_test.cpp
// measures them); hardtanh's gradient is a selection and exact.
#pragma once

#include <cstdint>

namespace kiln::cpu {

struct ActivationF32Kernels {
  // out = x <= 0 ? alpha * (e^x - 1) : x
  void (*elu)(float* out, const float* x, int64_t n, float alpha);
  // out = grad * elu'(x), from the input or from elu's output (ActivationKernels::elu_backward)
  void (*elu_backward)(float* out, const float* grad, int64_t grad_step, const float* x, int64_t x_step, int64_t n,
                       float alpha, bool from_output);
  // out = x <= lo || x >= hi ? 0 : grad
  void (*hardtanh_backward)(float* out, const float* grad, int64_t grad_step, const float* x, int64_t x_step,
                            int64_t n, float lo, float hi);
};

extern const ActivationF32Kernels activation_f32_avx2;
extern const ActivationF32Kernels activation_f32_avx512;

// The kernels for this CPU's simd_level(), or nullptr for the scalar level.
const ActivationF32Kernels* activation_f32_kernels();

}  // namespace kiln::cpu
