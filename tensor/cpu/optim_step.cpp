// CPU fused optimizer steps (Note [Fused optimizer steps] in
// tensor/fused_optim.h).
//
// Each statement below is one of the unfused ops (optim/sgd.h,
// optim/adam.h), in its order and rounded to T like the op's output; the scalars are converted to
// T first, as the ops wrap them. This file is compiled for baseline x86-64
// (no FMA), so the compiler cannot contract a product and a sum into one
// rounding and drift from the unfused results.
#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"

namespace kiln::cpu {

namespace {

// Elements per thread below which a parameter is updated on one thread.
constexpr int64_t kGrain = int64_t{1} << 16;

// Calls fn.template operator()<flags...>() with each runtime flag turned
// into a template argument, so that the loop below has no branch and
// vectorizes (with the flags tested per element it ran 2.5x slower than the
// unfused ops' SIMD kernels).
template <bool... Bound, class Fn>
void bind_flags(const Fn& fn) {
  fn.template operator()<Bound...>();
}
template <bool... Bound, class Fn, class... Rest>
void bind_flags(const Fn& fn, bool flag, Rest... rest) {
  if (flag) {
    bind_flags<Bound..., true>(fn, rest...);
  } else {
    bind_flags<Bound..., false>(fn, rest...);
  }
}

template <class T>
void sgd_step_typed(const Tensor& param, const Tensor& grad, const Tensor* buffer, bool first_step,
                    const SgdStep& s) {
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  T* b = buffer ? buffer->data<T>() : nullptr;
  const T weight_decay = static_cast<T>(s.weight_decay), momentum = static_cast<T>(s.momentum);
  const T keep = static_cast<T>(1.0 - s.dampening), step = static_cast<T>(-s.lr);
  auto loop = [&]<bool kMaximize, bool kDecay, bool kBuffer, bool kFirst, bool kDamped, bool kNesterov>() {
    parallel_for(0, param.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T d = kMaximize ? -g[i] : g[i];
        if constexpr (kDecay) {
          const T decay_term = weight_decay * p[i];
          d = d + decay_term;
        }
        if constexpr (kBuffer) {
          if constexpr (kFirst) {
            b[i] = d;
          } else {
            const T kept = kDamped ? keep * d : d;
            const T decayed = b[i] * momentum;
            b[i] = decayed + kept;
          }
          if constexpr (kNesterov) {
            const T look_ahead = momentum * b[i];
            d = d + look_ahead;
          } else {
            d = b[i];
          }
        }
        const T update = step * d;
        p[i] = p[i] + update;
      }
    });
  };
  bind_flags(loop, s.maximize, s.weight_decay != 0.0, b != nullptr, first_step, 1.0 - s.dampening != 1.0,
             s.nesterov);
}

// The scalars of one parameter's Adam step, each rounded to T where the
// unfused ops wrap it; the bias corrections are float64 (optim/adam.cpp).
template <class T>
struct AdamScalars {
  T beta1, keep1, beta2, keep2, weight_decay, decay_keep, bias_correction2_sqrt, eps, neg_step_size;

  AdamScalars(const AdamStep& s, double t)
      : beta1(static_cast<T>(s.beta1)),
        keep1(static_cast<T>(1.0 - s.beta1)),
        beta2(static_cast<T>(s.beta2)),
        keep2(static_cast<T>(1.0 - s.beta2)),
        weight_decay(static_cast<T>(s.weight_decay)),
        decay_keep(static_cast<T>(1.0 - s.lr * s.weight_decay)),
        bias_correction2_sqrt(static_cast<T>(std::sqrt(1.0 - std::pow(s.beta2, t)))),
        eps(static_cast<T>(s.eps)),
        neg_step_size(static_cast<T>(-(s.lr / (1.0 - std::pow(s.beta1, t))))) {}
};

// torch.maximum: NaN from either side wins.
template <class T>
T nan_maximum(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  return a < b ? b : a;
}

template <class T>
void adam_step_typed(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor* max_exp_avg_sq, double t, const AdamStep& s) {
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  T* m = exp_avg.data<T>();
  T* v = exp_avg_sq.data<T>();
  T* vmax = max_exp_avg_sq ? max_exp_avg_sq->data<T>() : nullptr;
  const AdamScalars<T> c(s, t);
  auto loop = [&]<bool kMaximize, bool kDecay, bool kDecoupled, bool kAmsgrad>() {
    parallel_for(0, param.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T d = kMaximize ? -g[i] : g[i];
        if constexpr (kDecay && kDecoupled) {
          p[i] = p[i] * c.decay_keep;
        } else if constexpr (kDecay) {
          const T decay_term = p[i] * c.weight_decay;
          d = d + decay_term;
        }
        const T m_kept = m[i] * c.beta1;
        const T m_new = d * c.keep1;
        m[i] = m_kept + m_new;
        const T v_kept = v[i] * c.beta2;
        const T d_scaled = d * c.keep2;
        const T v_new = d_scaled * d;
        v[i] = v_kept + v_new;
        T second = v[i];
        if constexpr (kAmsgrad) {
          vmax[i] = nan_maximum(vmax[i], v[i]);
          second = vmax[i];
        }
        const T root = std::sqrt(second);
        T denom = root / c.bias_correction2_sqrt;
        denom = denom + c.eps;
        T update = m[i] * c.neg_step_size;
        update = update / denom;
        p[i] = p[i] + update;
      }
    });
  };
  bind_flags(loop, s.maximize, s.weight_decay != 0.0, s.decoupled, vmax != nullptr);
}

// grad *= inv_scale; true when a product is not finite.
template <class T>
bool unscale_typed(const Tensor& grad, double inv_scale) {
  T* g = grad.data<T>();
  const T s = static_cast<T>(inv_scale);
  bool found = false;
  // A logical or over the threads: which thread saw it does not matter.
#pragma omp parallel for reduction(|| : found) if (grad.numel() > kGrain)
  for (int64_t i = 0; i < grad.numel(); ++i) {
    g[i] = g[i] * s;
    found = found || !std::isfinite(g[i]);
  }
  return found;
}

}  // namespace

void CpuBackend::unscale_grads(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found_inf) {
  bool found = false;
  for (const Tensor& grad : grads) {
    const bool here = grad.dtype() == DType::Float32 ? unscale_typed<float>(grad, inv_scale)
                                                     : unscale_typed<double>(grad, inv_scale);
    found = found || here;
  }
  if (found) *found_inf.data<float>() = 1.0f;
}

void CpuBackend::sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_step,
                          const SgdStep& step) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor* buffer = momentum_buffers.empty() ? nullptr : &momentum_buffers[i];
    const bool first = buffer != nullptr && first_step[i];
    if (params[i].dtype() == DType::Float32) {
      sgd_step_typed<float>(params[i], grads[i], buffer, first, step);
    } else {
      sgd_step_typed<double>(params[i], grads[i], buffer, first, step);
    }
  }
}

void CpuBackend::adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                           const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& steps,
                           const AdamStep& step) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor* max_sq = max_exp_avg_sqs.empty() ? nullptr : &max_exp_avg_sqs[i];
    if (params[i].dtype() == DType::Float32) {
      adam_step_typed<float>(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], max_sq, steps[i], step);
    } else {
      adam_step_typed<double>(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], max_sq, steps[i], step);
    }
  }
}

}  // namespace kiln::cpu
