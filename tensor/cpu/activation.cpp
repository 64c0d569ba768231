// CPU kernels of elu and of the elu and hardtanh gradients
// (tensor/activation_kernels.h): a plain reference per op, in the dtype's
// compute type, with the vectorised float32 kernels (activation_simd.h)
// for the runs whose layout they take.
#include <cmath>
#include <type_traits>

#include "tensor/activation_kernels.h"
#include "tensor/cpu/activation_simd.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/loops.h"

namespace kiln::cpu {

const ActivationF32Kernels* activation_f32_kernels() {
  switch (simd_level()) {
    case SimdLevel::Avx512: return &activation_f32_avx512;
    case SimdLevel::Avx2: return &activation_f32_avx2;
    case SimdLevel::Scalar: break;
  }
  return nullptr;
}

namespace {

// Below this many elements a kernel stays on one thread.
constexpr int64_t kGrain = 1 << 15;

// The references. Each tests x <= 0 (or the bounds) as torch's kernels do,
// so a NaN takes the x > 0 side: elu keeps it, the gradients pass g.
template <class C>
C elu_value(C x, C alpha) {
  return x <= C(0) ? alpha * std::expm1(x) : x;
}
template <class C>
C elu_grad(C g, C x, C alpha) {
  return x <= C(0) ? g * alpha * std::exp(x) : g;
}
template <class C>
C elu_grad_from_output(C g, C y, C alpha) {
  return y <= C(0) ? g * (y + alpha) : g;
}
template <class C>
C hardtanh_grad(C g, C x, C lo, C hi) {
  return x <= lo || x >= hi ? C(0) : g;
}

// out[i] = f(x[i]) over any strides. `simd(o, x, n)` may take a contiguous
// float32 run and returns whether it did.
template <class T, class Simd, class F>
void map_unary(const Tensor& out, const Tensor& in, const Simd& simd, const F& f) {
  using C = ComputeType<T>;
  StridedLoop<2> loop({&out, &in});
  loop.run(kGrain, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      if constexpr (std::is_same_v<T, float>) {
        if (simd(o, x, n)) return;
      }
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(static_cast<C>(x[i])));
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      C x = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(f(x));
    }
  });
}

// out[i] = f(a[i], b[i]) over any strides. `simd(o, a, a_step, b, b_step, n)`
// may take a float32 run whose inputs are contiguous or broadcast (step 1
// or 0) and returns whether it did.
template <class T, class Simd, class F>
void map_binary(const Tensor& out, const Tensor& a, const Tensor& b, const Simd& simd, const F& f) {
  using C = ComputeType<T>;
  constexpr int64_t t = sizeof(T);
  StridedLoop<3> loop({&out, &a, &b});
  loop.run(kGrain, [&](char** p, const int64_t* s, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (s[0] == t && (s[1] == t || s[1] == 0) && (s[2] == t || s[2] == 0)) {
        if (simd(reinterpret_cast<float*>(p[0]), reinterpret_cast<const float*>(p[1]), s[1] != 0,
                 reinterpret_cast<const float*>(p[2]), s[2] != 0, n)) {
          return;
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      C x = static_cast<C>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      C y = static_cast<C>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
      *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(f(x, y));
    }
  });
}

class CpuActivationKernels final : public ActivationKernels {
 public:
  void elu(const Tensor& out, const Tensor& x, double alpha) override {
    const ActivationF32Kernels* simd = activation_f32_kernels();
    visit_floating_dtype(x.dtype(), "elu", [&]<class T>() {
      using C = ComputeType<T>;
      const C a = static_cast<C>(alpha);
      map_unary<T>(
          out, x,
          [&](float* o, const float* in, int64_t n) {
            if (simd) simd->elu(o, in, n, static_cast<float>(alpha));
            return simd != nullptr;
          },
          [a](C v) { return elu_value(v, a); });
    });
  }

  void elu_backward(const Tensor& grad_in, const Tensor& grad, const Tensor& x_or_output, double alpha,
                    bool from_output) override {
    const ActivationF32Kernels* simd = activation_f32_kernels();
    visit_floating_dtype(grad.dtype(), "elu_backward", [&]<class T>() {
      using C = ComputeType<T>;
      const C a = static_cast<C>(alpha);
      auto vector = [&](float* o, const float* g, int64_t g_step, const float* v, int64_t v_step, int64_t n) {
        if (simd) simd->elu_backward(o, g, g_step, v, v_step, n, static_cast<float>(alpha), from_output);
        return simd != nullptr;
      };
      if (from_output) {
        map_binary<T>(grad_in, grad, x_or_output, vector, [a](C g, C y) { return elu_grad_from_output(g, y, a); });
      } else {
        map_binary<T>(grad_in, grad, x_or_output, vector, [a](C g, C v) { return elu_grad(g, v, a); });
      }
    });
  }

  void hardtanh_backward(const Tensor& grad_in, const Tensor& grad, const Tensor& x, double min_val,
                         double max_val) override {
    const ActivationF32Kernels* simd = activation_f32_kernels();
    visit_floating_dtype(grad.dtype(), "hardtanh_backward", [&]<class T>() {
      using C = ComputeType<T>;
      // The bounds rounded to T, as the forward's clamp rounds them.
      const C lo = static_cast<C>(Scalar(min_val).to<T>()), hi = static_cast<C>(Scalar(max_val).to<T>());
      map_binary<T>(
          grad_in, grad, x,
          [&](float* o, const float* g, int64_t g_step, const float* v, int64_t v_step, int64_t n) {
            if (simd) {
              simd->hardtanh_backward(o, g, g_step, v, v_step, n, static_cast<float>(lo), static_cast<float>(hi));
            }
            return simd != nullptr;
          },
          [lo, hi](C g, C v) { return hardtanh_grad(g, v, lo, hi); });
    });
  }
};

}  // namespace

KILN_REGISTER_KERNEL_GROUP(ActivationKernels, DeviceType::CPU, CpuActivationKernels);

}  // namespace kiln::cpu
