// CPU batch norm kernels (Note [Normalization statistics] in tensor/norm.h;
// front-end in tensor/norm.cpp), and the baseline build of the float32 run
// sums of tensor/cpu/norm_simd.h. The layouts and the way sums are taken:
// Note [Norm layouts] in tensor/cpu/norm_kernels.h.
#include <algorithm>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/norm_kernels.h"

namespace kiln::cpu {
namespace {

// Planes shorter than this use the column layout (Note [Norm layouts]).
constexpr int64_t kMinPlane = 32;
// Longer planes are cut into pieces of at most this many elements, so that a
// few large planes still feed every thread and each piece's second pass
// reads from cache.
constexpr int64_t kMaxPiece = 32768;

// Batch norm's (N, C, S) view and its layout (Note [Norm layouts]).
struct BatchShape {
  int64_t n, c, s;

  explicit BatchShape(const Tensor& x) : n(x.size(0)), c(x.size(1)), s(x.size(2)) {}
  bool by_plane() const { return s >= kMinPlane; }
  // Planes are cut into `pieces` pieces of `piece` elements (the last shorter).
  int64_t pieces() const { return (s + kMaxPiece - 1) / kMaxPiece; }
  int64_t piece() const { return (s + pieces() - 1) / pieces(); }
  int64_t width() const { return c * s; }
  // The column layout: N rows of C*S columns.
  ColumnLayout columns() const { return {n, c * s}; }
};

// Calls fn(offset, row, col, len) for the pieces of the flat range
// [begin, end) of a (rows, width) array cut at row ends.
template <class Fn>
void for_each_run(int64_t begin, int64_t end, int64_t width, const Fn& fn) {
  while (begin < end) {
    int64_t row = begin / width, col = begin % width;
    int64_t len = std::min(end - begin, width - col);
    fn(begin, row, col, len);
    begin += len;
  }
}

// Per-channel values repeated for each of the S columns of a channel:
// (C) -> (C*S), so column-layout loops index them by column.
template <class C>
std::vector<C> per_column(const C* values, const BatchShape& shape) {
  std::vector<C> out(shape.width());
  for (int64_t c = 0; c < shape.c; ++c) std::fill_n(out.begin() + c * shape.s, shape.s, values[c]);
  return out;
}

template <class T>
void batch_norm_stats_typed(const Tensor& mean, const Tensor& var, const Tensor& x) {
  using C = ComputeType<T>;
  BatchShape shape(x);
  const T* src = static_cast<const T*>(x.data_ptr());
  // parts: (B, C, P) moments that merge into each channel's, in order: B
  // images and P plane pieces, or B row blocks and P = S columns.
  int64_t blocks, per_channel;
  std::vector<Moments> parts;
  if (shape.by_plane()) {
    blocks = shape.n, per_channel = shape.pieces();
    int64_t piece = shape.piece();
    parts.resize(shape.n * shape.c * per_channel);
    parallel_for(0, shape.n * shape.c * per_channel, std::max<int64_t>(1, kGrain / piece),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t u = begin; u < end; ++u) {
                     int64_t plane = u / per_channel, start = (u % per_channel) * piece;
                     parts[u] = row_moments(src + plane * shape.s + start, std::min(piece, shape.s - start));
                   }
                 });
  } else {
    int64_t width = shape.width();
    blocks = shape.columns().row_blocks(), per_channel = shape.s;
    parts.resize(blocks * width);
    for_each_column_unit(shape.columns(), [&](int64_t block, int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
      // Two passes down the block's rows, all columns of the chunk at once.
      // The first only finds a shift near each column's mean, so plain C
      // sums do; the second sums kColumnBlockRows rows at a time in C before
      // adding to float64 (Note [Blocked summation]).
      int64_t cols = j1 - j0;
      const T* base = src + r0 * width + j0;
      double rows = static_cast<double>(r1 - r0);
      C shift[kColumnChunk], part_first[kColumnChunk], part_second[kColumnChunk];
      double first[kColumnChunk], second[kColumnChunk];
      for (int64_t j = 0; j < cols; ++j) shift[j] = static_cast<C>(base[j]), part_first[j] = 0;
      for (int64_t r = 0; r < r1 - r0; ++r) {
        const T* row = base + r * width;
        for (int64_t j = 0; j < cols; ++j) part_first[j] += static_cast<C>(row[j]) - shift[j];
      }
      for (int64_t j = 0; j < cols; ++j) {
        shift[j] = static_cast<C>(shift[j] + part_first[j] / rows);
        first[j] = 0, second[j] = 0;
      }
      for (int64_t rb = 0; rb < r1 - r0; rb += kColumnBlockRows) {
        std::fill_n(part_first, cols, C(0));
        std::fill_n(part_second, cols, C(0));
        for (int64_t r = rb; r < std::min(r1 - r0, rb + kColumnBlockRows); ++r) {
          const T* row = base + r * width;
          for (int64_t j = 0; j < cols; ++j) {
            C d = static_cast<C>(row[j]) - shift[j];
            part_first[j] += d;
            part_second[j] += d * d;
          }
        }
        for (int64_t j = 0; j < cols; ++j) first[j] += part_first[j], second[j] += part_second[j];
      }
      Moments* out = parts.data() + block * width + j0;
      for (int64_t j = 0; j < cols; ++j) {
        out[j] = {rows, shift[j] + first[j] / rows, std::max(0.0, second[j] - first[j] * first[j] / rows)};
      }
    });
  }
  C* mean_out = mean.data<C>();
  C* var_out = var.data<C>();
  parallel_for(0, shape.c, std::max<int64_t>(1, kGrain / (blocks * per_channel)), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      Moments total;
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t k = 0; k < per_channel; ++k) total = merge(total, parts[(b * shape.c + c) * per_channel + k]);
      }
      mean_out[c] = static_cast<C>(total.mean);
      var_out[c] = static_cast<C>(total.m2 / total.count);
    }
  });
}

// out = (x - mean[c]) * scale[c] + shift[c], plus dy * dy_scale[c] when dy
// is given (the backward); every coefficient array is (C).
template <class T>
void batch_norm_affine(T* out, const T* x, const T* dy, const BatchShape& shape, const ComputeType<T>* mean,
                       const ComputeType<T>* scale, const ComputeType<T>* shift,
                       const ComputeType<T>* dy_scale) {
  using C = ComputeType<T>;
  int64_t total = shape.n * shape.width();
  if (shape.by_plane()) {
    parallel_for(0, total, kGrain, [&](int64_t begin, int64_t end) {
      for_each_run(begin, end, shape.s, [&](int64_t at, int64_t plane, int64_t, int64_t len) {
        int64_t c = plane % shape.c;
        C m = mean[c], a = scale[c], b = shift[c];
        if (dy) {
          C g = dy_scale[c];
          for (int64_t i = at; i < at + len; ++i) {
            out[i] = static_cast<T>(static_cast<C>(dy[i]) * g + ((static_cast<C>(x[i]) - m) * a + b));
          }
        } else {
          for (int64_t i = at; i < at + len; ++i) out[i] = static_cast<T>((static_cast<C>(x[i]) - m) * a + b);
        }
      });
    });
    return;
  }
  std::vector<C> m = per_column(mean, shape), a = per_column(scale, shape), b = per_column(shift, shape);
  std::vector<C> g = dy ? per_column(dy_scale, shape) : std::vector<C>();
  parallel_for(0, total, kGrain, [&](int64_t begin, int64_t end) {
    for_each_run(begin, end, shape.width(), [&](int64_t at, int64_t, int64_t col, int64_t len) {
      const C *mc = m.data() + col, *ac = a.data() + col, *bc = b.data() + col;
      const T* xs = x + at;
      T* o = out + at;
      if (dy) {
        const T* gs = dy + at;
        const C* gc = g.data() + col;
        for (int64_t i = 0; i < len; ++i) {
          o[i] = static_cast<T>(static_cast<C>(gs[i]) * gc[i] + ((static_cast<C>(xs[i]) - mc[i]) * ac[i] + bc[i]));
        }
      } else {
        for (int64_t i = 0; i < len; ++i) o[i] = static_cast<T>((static_cast<C>(xs[i]) - mc[i]) * ac[i] + bc[i]);
      }
    });
  });
}

template <class T>
void batch_norm_backward_reduce_typed(const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& grad_out,
                                      const Tensor& x, const Tensor& mean) {
  using C = ComputeType<T>;
  BatchShape shape(x);
  const T* xs = static_cast<const T*>(x.data_ptr());
  const T* dy = static_cast<const T*>(grad_out.data_ptr());
  const C* mu = static_cast<const C*>(mean.data_ptr());
  // parts: (B, C, P) sums that add up to each channel's, in order (as in
  // batch_norm_stats_typed).
  int64_t blocks, per_channel;
  std::vector<NormSums> parts;
  if (shape.by_plane()) {
    blocks = shape.n, per_channel = shape.pieces();
    int64_t piece = shape.piece();
    parts.resize(shape.n * shape.c * per_channel);
    parallel_for(0, shape.n * shape.c * per_channel, std::max<int64_t>(1, kGrain / piece),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t u = begin; u < end; ++u) {
                     int64_t plane = u / per_channel, start = (u % per_channel) * piece;
                     const T* g = dy + plane * shape.s + start;
                     const T* xp = xs + plane * shape.s + start;
                     C m = mu[plane % shape.c];
                     const C* no_weight = nullptr;
                     parts[u] = grad_sums<T>(g, xp, no_weight, std::min(piece, shape.s - start), m);
                   }
                 });
  } else {
    int64_t width = shape.width();
    blocks = shape.columns().row_blocks(), per_channel = shape.s;
    parts.resize(blocks * width);
    std::vector<C> m = per_column(mu, shape);
    for_each_column_unit(shape.columns(), [&](int64_t block, int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
      // Sums in C over kColumnBlockRows rows, then into float64.
      int64_t cols = j1 - j0;
      const C* mc = m.data() + j0;
      C part_first[kColumnChunk], part_second[kColumnChunk];
      double first[kColumnChunk] = {}, second[kColumnChunk] = {};
      for (int64_t rb = r0; rb < r1; rb += kColumnBlockRows) {
        std::fill_n(part_first, cols, C(0));
        std::fill_n(part_second, cols, C(0));
        for (int64_t r = rb; r < std::min(r1, rb + kColumnBlockRows); ++r) {
          const T* g = dy + r * width + j0;
          const T* xr = xs + r * width + j0;
          for (int64_t j = 0; j < cols; ++j) {
            C gj = static_cast<C>(g[j]);
            part_first[j] += gj;
            part_second[j] += gj * (static_cast<C>(xr[j]) - mc[j]);
          }
        }
        for (int64_t j = 0; j < cols; ++j) first[j] += part_first[j], second[j] += part_second[j];
      }
      NormSums* out = parts.data() + block * width + j0;
      for (int64_t j = 0; j < cols; ++j) out[j] = {first[j], second[j]};
    });
  }
  C* dy_out = sum_dy.data<C>();
  C* dy_xmu_out = sum_dy_xmu.data<C>();
  for (int64_t c = 0; c < shape.c; ++c) {
    NormSums total;
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t k = 0; k < per_channel; ++k) {
        const NormSums& part = parts[(b * shape.c + c) * per_channel + k];
        total.first += part.first;
        total.second += part.second;
      }
    }
    dy_out[c] = static_cast<C>(total.first);
    dy_xmu_out[c] = static_cast<C>(total.second);
  }
}

}  // namespace

NormSums shifted_sums_f32_scalar(const float* x, int64_t n, float shift) { return shifted_sums_impl(x, n, shift); }

NormSums grad_sums_f32_scalar(const float* dy, const float* x, const float* w, int64_t n, float mean) {
  return grad_sums_impl(dy, x, w, n, mean);
}

void CpuBackend::batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  if (x.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "batch_norm", [&]<class T>() { batch_norm_stats_typed<T>(mean, var, x); });
}

void CpuBackend::batch_norm_apply(const Tensor& out, const Tensor& x, const Tensor& mean, const Tensor& scale,
                                  const Tensor& shift) {
  if (x.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "batch_norm", [&]<class T>() {
    using C = ComputeType<T>;
    batch_norm_affine<T>(out.data<T>(), static_cast<const T*>(x.data_ptr()), nullptr, BatchShape(x),
                         mean.data<C>(), scale.data<C>(), shift.data<C>(), nullptr);
  });
}

void CpuBackend::batch_norm_backward_reduce(const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& grad_out,
                                            const Tensor& x, const Tensor& mean) {
  visit_floating_dtype(x.dtype(), "batch_norm_backward", [&]<class T>() {
    if (x.numel() == 0) {
      std::fill_n(sum_dy.data<ComputeType<T>>(), sum_dy.numel(), ComputeType<T>(0));
      std::fill_n(sum_dy_xmu.data<ComputeType<T>>(), sum_dy_xmu.numel(), ComputeType<T>(0));
      return;
    }
    batch_norm_backward_reduce_typed<T>(sum_dy, sum_dy_xmu, grad_out, x, mean);
  });
}

void CpuBackend::batch_norm_backward_apply(const Tensor& grad_input, const Tensor& grad_out, const Tensor& x,
                                           const Tensor& mean, const Tensor& dy_scale, const Tensor& xmu_scale,
                                           const Tensor& shift) {
  if (x.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "batch_norm_backward", [&]<class T>() {
    using C = ComputeType<T>;
    batch_norm_affine<T>(grad_input.data<T>(), static_cast<const T*>(x.data_ptr()),
                         static_cast<const T*>(grad_out.data_ptr()), BatchShape(x), mean.data<C>(),
                         xmu_scale.data<C>(), shift.data<C>(), dy_scale.data<C>());
  });
}

}  // namespace kiln::cpu
