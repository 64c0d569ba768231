// CUDA kernels of elu and of the elu and hardtanh gradients
// (tensor/activation_kernels.h): the op functors, with the semantics of the
// CPU references (tensor/cpu/activation.cpp), run by the launcher of Note
// [Vectorised elementwise kernels].

#include "tensor/activation_kernels.h"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/cuda/math.cuh"

namespace kiln::cuda {
namespace {

// x <= 0 tests as torch's kernels do: a NaN takes the other side, so elu
// keeps it and the gradients pass g through.
template <class C>
struct EluOp {
  C alpha;
  __device__ C operator()(C x) const { return x <= C(0) ? alpha * expm1_of(x) : x; }
};

// a: gradient, b: elu's input.
template <class C>
struct EluBackwardOp {
  C alpha;
  __device__ C operator()(C g, C x) const { return x <= C(0) ? g * alpha * exp_of(x) : g; }
};

// a: gradient, b: elu's output.
template <class C>
struct EluBackwardFromOutputOp {
  C alpha;
  __device__ C operator()(C g, C y) const { return y <= C(0) ? g * (y + alpha) : g; }
};

// a: gradient, b: hardtanh's input or output; lo, hi: the bounds rounded to
// the tensor's dtype, then to the compute type.
template <class C>
struct HardtanhBackwardOp {
  C lo, hi;
  __device__ C operator()(C g, C x) const { return x <= lo || x >= hi ? C(0) : g; }
};

class CudaActivationKernels final : public ActivationKernels {
 public:
  void elu(const Tensor& out, const Tensor& x, double alpha) override {
    visit_floating_dtype(x.dtype(), "elu", [&]<class T>() {
      using D = DeviceType<T>;
      using C = ComputeType<T>;
      launch_elementwise<D, D, 1>("elu", out, {x}, EluOp<C>{static_cast<C>(alpha)});
    });
  }

  void elu_backward(const Tensor& grad_in, const Tensor& grad, const Tensor& x_or_output, double alpha,
                    bool from_output) override {
    visit_floating_dtype(grad.dtype(), "elu_backward", [&]<class T>() {
      using D = DeviceType<T>;
      using C = ComputeType<T>;
      const C a = static_cast<C>(alpha);
      if (from_output) {
        launch_elementwise<D, D, 2>("elu_backward", grad_in, {grad, x_or_output}, EluBackwardFromOutputOp<C>{a});
      } else {
        launch_elementwise<D, D, 2>("elu_backward", grad_in, {grad, x_or_output}, EluBackwardOp<C>{a});
      }
    });
  }

  void hardtanh_backward(const Tensor& grad_in, const Tensor& grad, const Tensor& x, double min_val,
                         double max_val) override {
    visit_floating_dtype(grad.dtype(), "hardtanh_backward", [&]<class T>() {
      using D = DeviceType<T>;
      using C = ComputeType<T>;
      const HardtanhBackwardOp<C> op{static_cast<C>(Scalar(min_val).to<T>()), static_cast<C>(Scalar(max_val).to<T>())};
      launch_elementwise<D, D, 2>("hardtanh_backward", grad_in, {grad, x}, op);
    });
  }
};

}  // namespace

KILN_REGISTER_KERNEL_GROUP(ActivationKernels, ::kiln::DeviceType::CUDA, CudaActivationKernels);

}  // namespace kiln::cuda
