// CPU layer norm kernels (Note [Normalization statistics] in tensor/norm.h;
// front-end in tensor/norm.cpp).
//
// x is (M, K) rows, each normalised on its own: threads split rows. The
// weight and bias gradients are sums down the rows, computed as column sums
// (tensor/cpu/norm_kernels.h) so that a few long rows still use every thread.
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/norm_kernels.h"

namespace kiln::cpu {
namespace {

template <class T>
void layer_norm_typed(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                      const Tensor& weight, const Tensor& bias, double eps) {
  using C = ComputeType<T>;
  int64_t rows = x.size(0), k = x.size(1);
  const T* src = static_cast<const T*>(x.data_ptr());
  T* dst = out.data<T>();
  const C* w = weight.data<C>();  // (K)
  const C* b = bias.data<C>();    // (K)
  C* mean_out = mean.data<C>();   // (M)
  C* rstd_out = rstd.data<C>();   // (M)
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, k)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = src + r * k;
      T* o = dst + r * k;
      // An empty row (K = 0) gets mean 0 and rstd NaN, as torch.
      constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
      Moments moments = k > 0 ? row_moments(xr, k) : Moments{0, 0, kNaN};
      C m = static_cast<C>(moments.mean);
      C s = static_cast<C>(1.0 / std::sqrt(moments.m2 / k + eps));
      mean_out[r] = m;
      rstd_out[r] = s;
      for (int64_t i = 0; i < k; ++i) o[i] = static_cast<T>((static_cast<C>(xr[i]) - m) * s * w[i] + b[i]);
    }
  });
}

// grad_input rows: with dyw = dy * w and xhat = (x - mean) * rstd,
//   dx = rstd * (dyw - mean(dyw) - xhat * mean(dyw * xhat)).
template <class T>
void layer_norm_grad_input(T* grad_x, const T* dy, const T* x, const ComputeType<T>* mean,
                           const ComputeType<T>* rstd, const ComputeType<T>* w, int64_t rows, int64_t k) {
  using C = ComputeType<T>;
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, k)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* g = dy + r * k;
      const T* xr = x + r * k;
      C m = mean[r], s = rstd[r];
      NormSums sums = grad_sums<T>(g, xr, w, k, m);
      C c_xmu = static_cast<C>(-static_cast<double>(s) * s * s * sums.second / k);
      C c_0 = static_cast<C>(-static_cast<double>(s) * sums.first / k);
      T* gx = grad_x + r * k;
      for (int64_t i = 0; i < k; ++i) {
        gx[i] = static_cast<T>(static_cast<C>(g[i]) * w[i] * s + ((static_cast<C>(xr[i]) - m) * c_xmu + c_0));
      }
    }
  });
}

// grad_weight = sum over rows of dy * xhat, grad_bias = sum of dy; each
// written when not null.
template <class T>
void layer_norm_grad_params(ComputeType<T>* grad_weight, ComputeType<T>* grad_bias, const T* dy, const T* x,
                            const ComputeType<T>* mean, const ComputeType<T>* rstd, int64_t rows, int64_t k) {
  using C = ComputeType<T>;
  ColumnLayout layout{rows, k};
  // partial: (row blocks, K) sums {dy * xhat, dy} of each block.
  std::vector<NormSums> partial(layout.row_blocks() * k);
  for_each_column_unit(layout, [&](int64_t block, int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
    int64_t cols = j1 - j0;
    C part_w[kColumnChunk], part_b[kColumnChunk];
    double sum_w[kColumnChunk] = {}, sum_b[kColumnChunk] = {};
    for (int64_t rb = r0; rb < r1; rb += kColumnBlockRows) {
      std::fill_n(part_w, cols, C(0));
      std::fill_n(part_b, cols, C(0));
      for (int64_t r = rb; r < std::min(r1, rb + kColumnBlockRows); ++r) {
        const T* g = dy + r * k + j0;
        const T* xr = x + r * k + j0;
        C m = mean[r], s = rstd[r];
        for (int64_t j = 0; j < cols; ++j) {
          C gj = static_cast<C>(g[j]);
          part_w[j] += gj * ((static_cast<C>(xr[j]) - m) * s);
          part_b[j] += gj;
        }
      }
      for (int64_t j = 0; j < cols; ++j) sum_w[j] += part_w[j], sum_b[j] += part_b[j];
    }
    for (int64_t j = 0; j < cols; ++j) partial[block * k + j0 + j] = {sum_w[j], sum_b[j]};
  });
  for (int64_t i = 0; i < k; ++i) {
    NormSums total;
    for (int64_t block = 0; block < layout.row_blocks(); ++block) {
      total.first += partial[block * k + i].first;
      total.second += partial[block * k + i].second;
    }
    if (grad_weight) grad_weight[i] = static_cast<C>(total.first);
    if (grad_bias) grad_bias[i] = static_cast<C>(total.second);
  }
}

}  // namespace

void CpuBackend::layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                            const Tensor& weight, const Tensor& bias, double eps) {
  visit_floating_dtype(x.dtype(), "layer_norm",
                       [&]<class T>() { layer_norm_typed<T>(out, mean, rstd, x, weight, bias, eps); });
}

void CpuBackend::layer_norm_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& weight) {
  visit_floating_dtype(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using C = ComputeType<T>;
    int64_t rows = x.size(0), k = x.size(1);
    const T* xs = static_cast<const T*>(x.data_ptr());      // (M, K)
    const T* dy = static_cast<const T*>(grad_out.data_ptr());  // (M, K)
    const C* mu = mean.data<C>();                               // (M)
    const C* rs = rstd.data<C>();                               // (M)
    if (grad_input.defined()) layer_norm_grad_input<T>(grad_input.data<T>(), dy, xs, mu, rs, weight.data<C>(), rows, k);
    if (grad_weight.defined() || grad_bias.defined()) {
      layer_norm_grad_params<T>(grad_weight.defined() ? grad_weight.data<C>() : nullptr,
                                grad_bias.defined() ? grad_bias.data<C>() : nullptr, dy, xs, mu, rs, rows, k);
    }
  });
}

}  // namespace kiln::cpu
