// Vectorised float32 elementwise kernels (Note [SIMD dispatch]).
//
// Each kernel processes one contiguous run of n elements; a binary operand's
// step is 1 (contiguous) or 0 (a broadcast scalar, read once). They return
// false when they have no vector form of `op`, and the caller then runs its
// scalar loop. The definitions live in elementwise_avx2.cpp and
// elementwise_avx512.cpp, which share one implementation written against a
// small register type (tensor/cpu/elementwise_vec.h), so the two differ only
// in register width.
//
// Accuracy: add/sub/mul/div/sqrt/max/min are exact IEEE operations; exp,
// sigmoid, tanh and gelu use polynomial approximations, measured against
// float64 over dense sweeps by tests/tensor/elementwise_simd_test.cpp (AVX2):
// exp 1 ulp, log 2, sigmoid and tanh 2.3, gelu 5.6. gelu(tanh) adds the float
// rounding of its inner cubic, amplified for negative x (see vec::gelu_tanh).
// The gelu derivatives (BinaryOp::GeluBackward, GeluTanhBackward) are within
// 4.9 and 3.2 ulps of their larger term, the tanh form plus the same
// amplification (tests/tensor/elementwise_simd_test.cpp).
#pragma once

#include <cstdint>

#include "tensor/backend.h"

namespace kiln::cpu {

using BinaryF32Kernel = bool (*)(BinaryOp op, float* out, const float* a, int64_t a_step, const float* b,
                                 int64_t b_step, int64_t n);
using UnaryF32Kernel = bool (*)(UnaryOp op, float* out, const float* in, int64_t n);

bool binary_f32_avx2(BinaryOp op, float* out, const float* a, int64_t a_step, const float* b, int64_t b_step,
                     int64_t n);
bool unary_f32_avx2(UnaryOp op, float* out, const float* in, int64_t n);
bool binary_f32_avx512(BinaryOp op, float* out, const float* a, int64_t a_step, const float* b, int64_t b_step,
                       int64_t n);
bool unary_f32_avx512(UnaryOp op, float* out, const float* in, int64_t n);

// The kernels for this CPU's simd_level(), or nullptr for the scalar level.
BinaryF32Kernel binary_f32_kernel();
UnaryF32Kernel unary_f32_kernel();

}  // namespace kiln::cpu
