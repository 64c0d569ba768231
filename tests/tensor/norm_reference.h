// Float64 references for the batch norm and layer norm tests
// (tests/tensor/norm_test.cpp, layer_norm_test.cpp): plain loops over
// row-major values, the closed-form gradients, and central finite
// differences to check those gradients.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace kiln::norm_testing {

using Values = std::vector<double>;

inline Values values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  const double* p = c.data<double>();
  return Values(p, p + c.numel());
}

inline void expect_close(const Values& got, const Values& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    bool ok = std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]);
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

inline Tensor make(const Values& v, const Shape& shape, DType dtype) { return from_vector<double>(v, shape).to(dtype); }

// ---- batch norm reference, x: (N, C, S) row-major ----------------------------

struct BatchDims {
  int64_t n, c, s;
  explicit BatchDims(const Shape& shape) : n(shape[0]), c(shape[1]), s(1) {
    for (size_t d = 2; d < shape.size(); ++d) s *= shape[d];
  }
  int64_t at(int64_t i, int64_t ch, int64_t k) const { return (i * c + ch) * s + k; }
};

struct BatchRef {
  Values out, mean, invstd, running_mean, running_var;
};

// w, b empty = affine off; running stats are updated copies.
inline BatchRef batch_norm_ref(const Values& x, const Shape& shape, const Values& w, const Values& b,
                               Values running_mean, Values running_var, bool training, double momentum, double eps) {
  BatchDims d(shape);
  double m = static_cast<double>(d.n * d.s);
  BatchRef r{Values(x.size()), Values(d.c), Values(d.c), running_mean, running_var};
  for (int64_t ch = 0; ch < d.c; ++ch) {
    double mean = 0, var = 0;
    if (training) {
      // Summed relative to the first value, so that a mean of 1e8 keeps
      // float64's digits below 1e-8.
      double first = x[d.at(0, ch, 0)];
      for (int64_t i = 0; i < d.n; ++i)
        for (int64_t k = 0; k < d.s; ++k) mean += x[d.at(i, ch, k)] - first;
      mean = first + mean / m;
      for (int64_t i = 0; i < d.n; ++i)
        for (int64_t k = 0; k < d.s; ++k) var += (x[d.at(i, ch, k)] - mean) * (x[d.at(i, ch, k)] - mean);
      var /= m;
      if (!running_mean.empty()) {
        r.running_mean[ch] = (1 - momentum) * running_mean[ch] + momentum * mean;
        r.running_var[ch] = (1 - momentum) * running_var[ch] + momentum * var * m / (m - 1);
      }
    } else {
      mean = running_mean[ch], var = running_var[ch];
    }
    r.mean[ch] = mean;
    r.invstd[ch] = 1 / std::sqrt(var + eps);
    for (int64_t i = 0; i < d.n; ++i) {
      for (int64_t k = 0; k < d.s; ++k) {
        double y = (x[d.at(i, ch, k)] - mean) * r.invstd[ch];
        r.out[d.at(i, ch, k)] = w.empty() ? y : y * w[ch] + b[ch];
      }
    }
  }
  return r;
}

struct Grads {
  Values x, w, b;
};

// Gradients of sum(dy * batch_norm(x)) from the closed form.
inline Grads batch_norm_backward_ref(const Values& dy, const Values& x, const Shape& shape, const Values& w,
                                     const Values& mean, const Values& invstd, bool training) {
  BatchDims d(shape);
  double m = static_cast<double>(d.n * d.s);
  Grads g{Values(x.size()), Values(d.c), Values(d.c)};
  for (int64_t ch = 0; ch < d.c; ++ch) {
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = 0; i < d.n; ++i) {
      for (int64_t k = 0; k < d.s; ++k) {
        int64_t j = d.at(i, ch, k);
        sum_dy += dy[j];
        sum_dy_xhat += dy[j] * (x[j] - mean[ch]) * invstd[ch];
      }
    }
    g.w[ch] = sum_dy_xhat;
    g.b[ch] = sum_dy;
    double gamma = w.empty() ? 1.0 : w[ch];
    for (int64_t i = 0; i < d.n; ++i) {
      for (int64_t k = 0; k < d.s; ++k) {
        int64_t j = d.at(i, ch, k);
        double xhat = (x[j] - mean[ch]) * invstd[ch];
        g.x[j] =
            training ? gamma * invstd[ch] / m * (m * dy[j] - sum_dy - xhat * sum_dy_xhat) : gamma * invstd[ch] * dy[j];
      }
    }
  }
  return g;
}

// Central differences of loss(values) = sum(dy * f(values)) for each value.
inline Values finite_differences(Values values, const Values& dy, const std::function<Values(const Values&)>& f) {
  const double h = 1e-6;
  Values grad(values.size());
  auto loss = [&](const Values& v) {
    Values y = f(v);
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i) total += dy[i] * y[i];
    return total;
  };
  for (size_t i = 0; i < values.size(); ++i) {
    double saved = values[i];
    values[i] = saved + h;
    double up = loss(values);
    values[i] = saved - h;
    double down = loss(values);
    values[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// ---- layer norm reference, x: (M, K) rows --------------------------------------

struct LayerRef {
  Values out, mean, rstd;
};

inline LayerRef layer_norm_ref(const Values& x, int64_t k, const Values& w, const Values& b, double eps) {
  int64_t rows = static_cast<int64_t>(x.size()) / k;
  LayerRef r{Values(x.size()), Values(rows), Values(rows)};
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < k; ++j) mean += x[i * k + j] - x[i * k];  // as in batch_norm_ref
    mean = x[i * k] + mean / k;
    for (int64_t j = 0; j < k; ++j) var += (x[i * k + j] - mean) * (x[i * k + j] - mean);
    var /= k;
    r.mean[i] = mean;
    r.rstd[i] = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < k; ++j) {
      double y = (x[i * k + j] - mean) * r.rstd[i];
      r.out[i * k + j] = w.empty() ? y : y * w[j] + b[j];
    }
  }
  return r;
}

inline Grads layer_norm_backward_ref(const Values& dy, const Values& x, int64_t k, const Values& w, const Values& mean,
                                     const Values& rstd) {
  int64_t rows = static_cast<int64_t>(x.size()) / k;
  Grads g{Values(x.size()), Values(k), Values(k)};
  for (int64_t i = 0; i < rows; ++i) {
    double sum_dyw = 0, sum_dyw_xhat = 0;
    for (int64_t j = 0; j < k; ++j) {
      double xhat = (x[i * k + j] - mean[i]) * rstd[i];
      double dyw = dy[i * k + j] * (w.empty() ? 1.0 : w[j]);
      sum_dyw += dyw;
      sum_dyw_xhat += dyw * xhat;
      g.w[j] += dy[i * k + j] * xhat;
      g.b[j] += dy[i * k + j];
    }
    for (int64_t j = 0; j < k; ++j) {
      double xhat = (x[i * k + j] - mean[i]) * rstd[i];
      double dyw = dy[i * k + j] * (w.empty() ? 1.0 : w[j]);
      g.x[i * k + j] = rstd[i] / k * (k * dyw - sum_dyw - xhat * sum_dyw_xhat);
    }
  }
  return g;
}

// Values with a mean that dwarfs their spread (std ~1): float32 around 1e4,
// float64 around 1e8. E[x^2] - E[x]^2 would lose every digit of the variance
// in either type.
struct LargeMeanCase {
  DType dtype;
  double mean;
  double rtol;  // of the statistics
  double atol;  // of the output: the mean itself is only good to half an ulp
};
inline const LargeMeanCase kLargeMeanCases[] = {{DType::Float32, 1e4, 1e-5, 1e-3}, {DType::Float64, 1e8, 1e-7, 1e-7}};

}  // namespace kiln::norm_testing
