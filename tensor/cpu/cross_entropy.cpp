// CPU class-index cross entropy, forward and backward, one row at a time
// (Note [Fused cross entropy] in tensor/cross_entropy.h). The log-softmax
// of a row follows tensor/cpu/softmax.cpp's plain row kernel: the max
// subtracted, the exponentials summed in float64, logp = (x - m) - log(sum).
#include <cmath>
#include <cstdint>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"

namespace kiln::cpu {

namespace {

// Elements per thread below which the rows stay on the calling thread.
constexpr int64_t kGrain = 16384;

// Row n's max and log of the sum of exponentials, in the compute type C.
template <class C, class T>
void row_statistics(const T* row, int64_t classes, C& max, C& log_sum, double& sum) {
  max = static_cast<C>(row[0]);
  for (int64_t c = 1; c < classes; ++c) {
    const C v = static_cast<C>(row[c]);
    max = v > max ? v : max;
  }
  sum = 0.0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(static_cast<C>(row[c]) - max));
  log_sum = static_cast<C>(std::log(sum));
}

bool in_range(int64_t target, int64_t classes) {
  return static_cast<uint64_t>(target) < static_cast<uint64_t>(classes);  // one compare covers target < 0
}

template <class T>
void forward_typed(const Tensor& losses, const Tensor& target_weights, const Tensor& x, const Tensor& target,
                   const Tensor& weight, int64_t ignore_index, double s) {
  using C = ComputeType<T>;
  const int64_t rows = x.size(0), classes = x.size(1);
  const T* logits = x.data<T>();
  const int64_t* t = target.data<int64_t>();
  const T* w = weight.defined() ? weight.data<T>() : nullptr;
  T* loss = losses.data<T>();
  T* tw = target_weights.data<T>();
  const C keep = static_cast<C>(1.0 - s), smooth = static_cast<C>(-s / static_cast<double>(classes));
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / classes), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      if (t[n] == ignore_index) {
        loss[n] = static_cast<T>(C(0));
        tw[n] = static_cast<T>(C(0));
        continue;
      }
      const T* row = logits + n * classes;
      C max, log_sum;
      double sum;
      row_statistics(row, classes, max, log_sum, sum);
      auto logp = [&](int64_t c) { return (static_cast<C>(row[c]) - max) - log_sum; };
      const C w_t = w ? static_cast<C>(w[t[n]]) : C(1);
      C l = -logp(t[n]) * w_t;
      if (s > 0) {
        C all = 0;  // sum_c w_c * logp_c
        for (int64_t c = 0; c < classes; ++c) all += (w ? static_cast<C>(w[c]) * logp(c) : logp(c));
        l = l * keep + all * smooth;
      }
      loss[n] = static_cast<T>(l);
      tw[n] = static_cast<T>(w_t);
    }
  });
}

template <class T>
void backward_typed(const Tensor& grad, const Tensor& grad_out, const Tensor& denominator, const Tensor& x,
                    const Tensor& target, const Tensor& weight, int64_t ignore_index, double s) {
  using C = ComputeType<T>;
  const int64_t rows = x.size(0), classes = x.size(1);
  const T* logits = x.data<T>();
  const int64_t* t = target.data<int64_t>();
  const T* w = weight.defined() ? weight.data<T>() : nullptr;
  const T* go = grad_out.data<T>();
  T* g = grad.data<T>();
  const bool one_upstream = grad_out.dim() == 0;
  const C total = denominator.defined() ? static_cast<C>(*denominator.data<T>()) : C(1);
  // s/C * sum_c w_c, which is s when unweighted.
  C weight_sum = 0;
  if (w) {
    for (int64_t c = 0; c < classes; ++c) weight_sum += static_cast<C>(w[c]);
  }
  const C smooth_part = w ? weight_sum * static_cast<C>(s / static_cast<double>(classes)) : static_cast<C>(s);
  const C keep = static_cast<C>(1.0 - s), at_target_factor = static_cast<C>(s - 1.0);
  const C smooth_factor = static_cast<C>(s / static_cast<double>(classes));
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / classes), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      T* out = g + n * classes;
      if (t[n] == ignore_index || !in_range(t[n], classes)) {
        for (int64_t c = 0; c < classes; ++c) out[c] = static_cast<T>(C(0));
        continue;
      }
      const T* row = logits + n * classes;
      C max, log_sum;
      double sum;
      row_statistics(row, classes, max, log_sum, sum);
      C u = static_cast<C>(one_upstream ? go[0] : go[n]);
      if (denominator.defined()) u = u / total;
      const C w_t = w ? static_cast<C>(w[t[n]]) : C(1);
      const C a = s > 0 ? w_t * keep + smooth_part : w_t;
      const C scale = u * a, at_target = u * (w_t * at_target_factor), smooth = u * smooth_factor;
      for (int64_t c = 0; c < classes; ++c) {
        C v = static_cast<C>(std::exp(static_cast<double>(static_cast<C>(row[c]) - max)) / sum) * scale;
        if (c == t[n]) v = v + at_target;
        if (s > 0) v = v - (w ? smooth * static_cast<C>(w[c]) : smooth);
        out[c] = static_cast<T>(v);
      }
    }
  });
}

}  // namespace

void CpuBackend::cross_entropy(const Tensor& losses, const Tensor& target_weights, const Tensor& x,
                               const Tensor& target, const Tensor& weight, int64_t ignore_index, double smoothing,
                               const IndexErrorMessage& message) {
  // Every target is checked before any row is computed, on this thread (an
  // exception must not leave an OpenMP region).
  const int64_t* t = target.data<int64_t>();
  for (int64_t n = 0; n < target.numel(); ++n) {
    if (t[n] != ignore_index && !in_range(t[n], x.size(1))) [[unlikely]] KILN_FAIL(message(t[n]));
  }
  visit_floating_dtype(x.dtype(), "cross_entropy", [&]<class T>() {
    forward_typed<T>(losses, target_weights, x, target, weight, ignore_index, smoothing);
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& grad, const Tensor& grad_out, const Tensor& denominator,
                                        const Tensor& x, const Tensor& target, const Tensor& weight,
                                        int64_t ignore_index, double smoothing) {
  visit_floating_dtype(x.dtype(), "cross_entropy_backward", [&]<class T>() {
    backward_typed<T>(grad, grad_out, denominator, x, target, weight, ignore_index, smoothing);
  });
}

}  // namespace kiln::cpu
