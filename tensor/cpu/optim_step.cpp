// CPU fused optimizer steps (Note [Fused optimizer steps] in
// tensor/fused_optim.h).
//
// Each statement below is one of the unfused ops (optim/sgd.h), in its
// order and rounded to T like the op's output; the scalars are converted to
// T first, as the ops wrap them. This file is compiled for baseline x86-64
// (no FMA), so the compiler cannot contract a product and a sum into one
// rounding and drift from the unfused results.
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

}  // namespace

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

}  // namespace kiln::cpu
