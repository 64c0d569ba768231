// Float32 kernels for reductions and softmax rows, one set per SIMD level.
//
// The _scalar versions are the portable reference; the _avx2 and _avx512 ones
// (tensor/cpu/reduce_avx2.cpp, reduce_avx512.cpp) must only be called when
// simd_level() allows them (Note [SIMD dispatch]). Tests compare each against
// the scalar version.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// Elements a sum block accumulates in float32 before the block's total joins
// a float64 running total (Note [Blocked summation] in tensor/cpu/reduce.cpp).
inline constexpr int64_t kSumBlock = 4096;

// Sum of x[0..n) in float32 with several independent accumulators combined
// as a tree; meant for n <= kSumBlock.
float sum_f32_scalar(const float* x, int64_t n);
float sum_f32_avx2(const float* x, int64_t n);
float sum_f32_avx512(const float* x, int64_t n);

// Max / min of x[0..n), n >= 1; NaN if any element is NaN (as torch).
float max_f32_scalar(const float* x, int64_t n);
float max_f32_avx2(const float* x, int64_t n);
float max_f32_avx512(const float* x, int64_t n);
float min_f32_scalar(const float* x, int64_t n);
float min_f32_avx2(const float* x, int64_t n);
float min_f32_avx512(const float* x, int64_t n);

// max_f32_* / min_f32_* as chosen for this CPU by simd_level().
float max_f32(const float* x, int64_t n);
float min_f32(const float* x, int64_t n);

// out[i] = exp(in[i]) for i < n; out may equal in. The SIMD versions are
// within a few ulp of std::exp, flush results below FLT_MIN to 0, and keep
// NaN.
void exp_f32_scalar(float* out, const float* in, int64_t n);
void exp_f32_avx2(float* out, const float* in, int64_t n);
void exp_f32_avx512(float* out, const float* in, int64_t n);
// exp_f32_* as chosen for this CPU by simd_level().
void exp_f32(float* out, const float* in, int64_t n);

// One softmax (log = false) or log-softmax row: out[0..n) from in[0..n),
// both contiguous, n >= 1; out may equal in.
void softmax_row_f32_scalar(float* out, const float* in, int64_t n, bool log);
void softmax_row_f32_avx2(float* out, const float* in, int64_t n, bool log);
void softmax_row_f32_avx512(float* out, const float* in, int64_t n, bool log);

}  // namespace kiln::cpu
