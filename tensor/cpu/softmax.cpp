// CPU softmax and log-softmax along any dim.
//
// Every row (the elements along `dim` for one index of the other dims) is
// made stable by subtracting its max before exp, so no exp overflows:
//   softmax(x)     = exp(x - m) / sum exp(x - m)
//   log_softmax(x) = (x - m) - log(sum exp(x - m))
// As torch, a row whose max is +-inf or NaN gives NaN (inf - inf).
//
// Layouts:
// - rows: `dim` contiguous in input and output (the last dim of a contiguous
//   tensor): float32 rows run the SIMD kernel directly; float64 rows the
//   plain loop; 16-bit rows go through a float32 buffer.
// - columns: `dim` outside a contiguous kept dim (dim 1 of (N, C, H*W)):
//   a chunk of columns is processed together, reading whole rows.
// - anything else: each row is gathered into a contiguous buffer.
// Threads split rows (or column chunks) only when there is enough work.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/reduce_plan.h"
#include "tensor/cpu/reduce_simd.h"

namespace kiln::cpu {
namespace {

// Below about this many elements softmax stays on the calling thread.
constexpr int64_t kGrain = 16384;
constexpr int64_t kColumnChunk = 2048;
constexpr int64_t kMinColumns = 16;

// The plain row kernel: out[0..n) from in[0..n), contiguous, in C (float or
// double) with a float64 sum.
template <class C>
void softmax_row(C* out, const C* in, int64_t n, bool log) {
  C max = in[0];
  for (int64_t i = 1; i < n; ++i) max = in[i] > max ? in[i] : max;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(in[i] - max));
  if (log) {
    C log_sum = static_cast<C>(std::log(sum));
    for (int64_t i = 0; i < n; ++i) out[i] = (in[i] - max) - log_sum;
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<C>(std::exp(static_cast<double>(in[i] - max)) / sum);
}

using FloatRowFn = void (*)(float*, const float*, int64_t, bool);

FloatRowFn pick_float_row() {
  switch (simd_level()) {
    case SimdLevel::Avx512: return softmax_row_f32_avx512;
    case SimdLevel::Avx2: return softmax_row_f32_avx2;
    case SimdLevel::Scalar: break;
  }
  return softmax_row_f32_scalar;
}

// A row in the compute type: float32 through the SIMD kernel, float64 plain.
template <class C>
void compute_row(C* out, const C* in, int64_t n, bool log) {
  if constexpr (std::is_same_v<C, float>) {
    static const FloatRowFn fast = pick_float_row();
    fast(out, in, n, log);
  } else {
    softmax_row(out, in, n, log);
  }
}

// Softmax down `rows` rows of `cols` (<= kColumnChunk) contiguous float32
// columns, row strides in_stride / out_stride: whole rows at a time, exp over
// a row of columns with the SIMD kernel, exponentials kept in out.
void softmax_columns_f32(float* out, const float* in, int64_t rows, int64_t cols, int64_t in_stride,
                         int64_t out_stride, bool log) {
  float max[kColumnChunk];
  float shifted[kColumnChunk];
  double sum[kColumnChunk];
  for (int64_t j = 0; j < cols; ++j) {
    max[j] = in[j];
    sum[j] = 0.0;
  }
  for (int64_t r = 1; r < rows; ++r) {
    const float* row = in + r * in_stride;
    for (int64_t j = 0; j < cols; ++j) max[j] = row[j] > max[j] ? row[j] : max[j];
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * in_stride;
    for (int64_t j = 0; j < cols; ++j) shifted[j] = row[j] - max[j];
    exp_f32(shifted, shifted, cols);
    for (int64_t j = 0; j < cols; ++j) sum[j] += shifted[j];
    if (!log) std::copy(shifted, shifted + cols, out + r * out_stride);
  }
  if (log) {
    for (int64_t j = 0; j < cols; ++j) shifted[j] = static_cast<float>(std::log(sum[j]));  // log of the sum
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = in + r * in_stride;
      float* dst = out + r * out_stride;
      for (int64_t j = 0; j < cols; ++j) dst[j] = (row[j] - max[j]) - shifted[j];
    }
    return;
  }
  for (int64_t j = 0; j < cols; ++j) shifted[j] = static_cast<float>(1.0 / sum[j]);  // reciprocal of the sum
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = out + r * out_stride;
    for (int64_t j = 0; j < cols; ++j) dst[j] *= shifted[j];
  }
}

// Softmax down `rows` rows of `cols` contiguous columns (row stride
// in_stride / out_stride), per column, in the compute type: the plain
// version, used for float64 and 16-bit types.
template <class T>
void softmax_columns(T* out, const T* in, int64_t rows, int64_t cols, int64_t in_stride, int64_t out_stride,
                     bool log) {
  using C = ComputeType<T>;
  C max[kColumnChunk];
  double sum[kColumnChunk];
  for (int64_t j = 0; j < cols; ++j) {
    max[j] = static_cast<C>(in[j]);
    sum[j] = 0.0;
  }
  for (int64_t r = 1; r < rows; ++r) {
    const T* row = in + r * in_stride;
    for (int64_t j = 0; j < cols; ++j) {
      C x = static_cast<C>(row[j]);
      max[j] = x > max[j] ? x : max[j];
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * in_stride;
    for (int64_t j = 0; j < cols; ++j) sum[j] += std::exp(static_cast<double>(static_cast<C>(row[j]) - max[j]));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * in_stride;
    T* dst = out + r * out_stride;
    for (int64_t j = 0; j < cols; ++j) {
      C shifted = static_cast<C>(row[j]) - max[j];
      double value = log ? shifted - std::log(sum[j]) : std::exp(static_cast<double>(shifted)) / sum[j];
      dst[j] = static_cast<T>(static_cast<C>(value));
    }
  }
}

template <class T>
void softmax_typed(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  using C = ComputeType<T>;
  T* dst = out.data<T>();
  const T* src = static_cast<const T*>(in.data_ptr());
  int64_t n = in.size(dim);
  int64_t in_stride = in.stride(dim);
  int64_t out_stride = out.stride(dim);
  DimSet<2> kept;  // strides: {in, out}
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d != dim) kept.add(in.size(d), {in.stride(d), out.stride(d)});
  }
  kept.coalesce();
  int64_t n_rows = kept.numel();

  bool columns = n > 1 && kept.ndim() > 0 && kept.strides.back()[0] == 1 && kept.strides.back()[1] == 1 &&
                 kept.sizes.back() >= kMinColumns;
  if (columns) {
    DimSet<2> outer = kept;
    int64_t cols = outer.pop_inner().first;
    int64_t chunks = (cols + kColumnChunk - 1) / kColumnChunk;
    int64_t units = outer.numel() * chunks;
    int64_t grain = std::max<int64_t>(1, kGrain / (n * std::min(cols, kColumnChunk)));
    parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        DimWalker<2> walker(outer, u / chunks);
        int64_t j0 = (u % chunks) * kColumnChunk;
        int64_t width = std::min(kColumnChunk, cols - j0);
        if constexpr (std::is_same_v<T, float>) {
          softmax_columns_f32(dst + walker.offset(1) + j0, src + walker.offset(0) + j0, n, width, in_stride,
                              out_stride, log);
        } else {
          softmax_columns(dst + walker.offset(1) + j0, src + walker.offset(0) + j0, n, width, in_stride,
                          out_stride, log);
        }
      }
    });
    return;
  }

  bool direct = std::is_same_v<T, C> && in_stride == 1 && out_stride == 1;
  int64_t grain = std::max<int64_t>(1, kGrain / n);
  parallel_for(0, n_rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<C> buffer(direct ? 0 : n);  // the gathered row
    DimWalker<2> walker(kept, begin);
    for (int64_t r = begin; r < end; ++r, walker.next()) {
      const T* row_in = src + walker.offset(0);
      T* row_out = dst + walker.offset(1);
      if constexpr (std::is_same_v<T, C>) {
        if (direct) {
          compute_row<C>(row_out, row_in, n, log);
          continue;
        }
      }
      for (int64_t i = 0; i < n; ++i) buffer[i] = static_cast<C>(row_in[i * in_stride]);
      compute_row<C>(buffer.data(), buffer.data(), n, log);
      for (int64_t i = 0; i < n; ++i) row_out[i * out_stride] = static_cast<T>(buffer[i]);
    }
  });
}

}  // namespace

void softmax_row_f32_scalar(float* out, const float* in, int64_t n, bool log) { softmax_row(out, in, n, log); }

void exp_f32_scalar(float* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i]);
}

void exp_f32(float* out, const float* in, int64_t n) {
  using FloatExpFn = void (*)(float*, const float*, int64_t);
  static const FloatExpFn fn = [] {
    switch (simd_level()) {
      case SimdLevel::Avx512: return exp_f32_avx512;
      case SimdLevel::Avx2: return exp_f32_avx2;
      case SimdLevel::Scalar: break;
    }
    return exp_f32_scalar;
  }();
  fn(out, in, n);
}

void CpuBackend::softmax(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  if (in.numel() == 0) return;
  visit_floating_dtype(in.dtype(), log ? "log_softmax" : "softmax",
                       [&]<class T>() { softmax_typed<T>(out, in, dim, log); });
}

}  // namespace kiln::cpu
