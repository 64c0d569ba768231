// CPU 2-d convolution: im2col + GEMM one image at a time, images spread over
// threads (Note [Convolution as per-image GEMMs] in tensor/conv.h).
//
// For image n, with P = oh*ow and CKK = C*kh*kw:
//   forward        out[n] (OC, P) = weight (OC, CKK) @ cols[n] (CKK, P) + bias
//   grad_weight^T  (CKK, OC)     += cols[n] (CKK, P) @ grad_out[n]^T (P, OC)
//   grad_input[n]  = col2im(weight^T (CKK, OC) @ grad_out[n] (OC, P))
// cols[n] is built in a per-thread buffer just before its products, so it is
// still in L2 when the GEMM reads it, and never exists for the whole batch.
// Float32 with stride and dilation 1 (LeNet's layers) skips im2col for the
// forward and grad_weight products: Note [Direct convolution over a wide
// output] in conv2d_direct.h.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "tensor/cpu/conv2d_direct.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// FLOPs per thread below which images stay on one thread (the GEMM's own
// threshold: ~25 us of work pays for waking a thread).
constexpr double kFlopsPerThread = double(int64_t{1} << 21);

template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb,
          int64_t csb, T beta, T* c, int64_t rsc) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm(m, n, k, 1.f, a, rsa, csa, b, rsb, csb, beta, c, rsc, 1);
  } else {
    dgemm(m, n, k, 1.0, a, rsa, csa, b, rsb, csb, beta, c, rsc, 1);
  }
}

// How many threads share the images. Each thread takes whole images, and the
// im2col / GEMM / col2im calls inside run serially (they see they are inside
// a parallel region): LeNet's per-image GEMMs are too small to split. Only
// when there are fewer images than threads and each image has work for all
// threads (a large image at inference) do the images run in turn on the
// caller, and those calls spread each image's work over the threads instead.
int threads_for_images(int64_t n_images, double flops_per_image) {
  const int threads = get_num_threads();
  if (n_images < threads && flops_per_image >= threads * kFlopsPerThread) return 1;
  const double wanted = flops_per_image * static_cast<double>(n_images) / kFlopsPerThread;
  const double most = static_cast<double>(std::min<int64_t>(threads, std::max<int64_t>(n_images, 1)));
  return static_cast<int>(std::clamp(wanted, 1.0, most));
}

// Runs body(range, begin, end) on `nthreads` threads over disjoint, ordered
// ranges of the n_images images.
template <class Body>
void over_images(int nthreads, int64_t n_images, const Body& body) {
  parallel_region(nthreads, [&](int tid, int nt) {
    // nt may be below nthreads (OpenMP may give fewer); ranges follow nt.
    body(tid, n_images * tid / nt, n_images * (tid + 1) / nt);
  });
}

template <class T>
void conv2d_kernel(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                   const Conv2dShape& s) {
  CpuBackend& cpu = backend();
  const int64_t n_images = x.size(0), oc = weight.size(0), ckk = weight.size(1), positions = s.output.h * s.output.w;
  const T* w = weight.data<T>();  // (OC, CKK)
  const T* b = bias.defined() ? bias.data<T>() : nullptr;
  T* out_data = out.data<T>();  // (N, OC, P), planes contiguous
  const int nthreads = threads_for_images(n_images, 2.0 * double(oc) * double(ckk) * double(positions));

  if constexpr (std::is_same_v<T, float>) {
    if (direct_conv_applies(p, s) && weight.stride(1) == 1 && out.stride(2) == out.size(3) && out.stride(3) == 1 &&
        (!b || bias.stride(0) == 1)) {
      const DirectConvPlan plan = make_direct_conv_plan(p, s, oc);
      const std::vector<float> packed = pack_direct_conv_weight(plan, w, weight.stride(0));
      const float* x_data = x.data<float>();
      over_images(nthreads, n_images, [&](int, int64_t begin, int64_t end) {
        if (begin == end) return;
        DirectConvScratch scratch(plan, oc, /*grad_weight=*/false, /*grad_input=*/false);
        for (int64_t n = begin; n < end; ++n) {
          load_direct_conv_image(plan, x_data + n * x.stride(0), x.stride(1), x.stride(2), x.stride(3), scratch);
          direct_conv_forward_image(plan, packed, b, out_data + n * out.stride(0), out.stride(1), scratch);
        }
      });
      return;
    }
  }
  over_images(nthreads, n_images, [&](int, int64_t begin, int64_t end) {
    if (begin == end) return;
    Tensor cols = Tensor::empty({1, ckk, positions}, x.dtype());  // (1, CKK, P): this thread's im2col buffer
    for (int64_t n = begin; n < end; ++n) {
      T* out_n = out_data + n * out.stride(0);  // (OC, P), rows out.stride(1) apart
      // The bias goes in first and the GEMM adds to it (beta = 1): one pass
      // over the output instead of two.
      if (b) {
        for (int64_t o = 0; o < oc; ++o) std::fill_n(out_n + o * out.stride(1), positions, b[o * bias.stride(0)]);
      }
      cpu.im2col(cols, x.slice(0, n, n + 1), p, s);
      gemm<T>(oc, positions, ckk, w, weight.stride(0), weight.stride(1), cols.data<T>(), positions, 1, b ? T(1) : T(0),
              out_n, out.stride(1));
    }
  });
}

// grad_weight (OC, CKK), rows grad_weight.stride(0) apart, = the sum of
// the `ranges` per-range blocks in `partial`, added in range order so that
// the result does not depend on thread timing. Each block is (OC, CKK), or
// (CKK, OC) when `transposed`.
template <class T>
void sum_partial_grad_weights(const std::vector<T>& partial, int ranges, bool transposed, const Tensor& grad_weight) {
  const int64_t oc = grad_weight.size(0), ckk = grad_weight.size(1), block = oc * ckk;
  T* gw = grad_weight.data<T>();
  for (int64_t o = 0; o < oc; ++o) {
    for (int64_t j = 0; j < ckk; ++j) {
      const int64_t at = transposed ? j * oc + o : o * ckk + j;
      T sum = 0;
      for (int r = 0; r < ranges; ++r) sum += partial[r * block + at];
      gw[o * grad_weight.stride(0) + j] = sum;
    }
  }
}

// The float32 stride-1 backward without im2col (Note [Direct convolution
// over a wide output]): per image, the input and grad_out are copied into
// the thread's padded planes once and serve both gradients. grad_weight
// sums per range in (OC, CKK) blocks, added in range order at the end.
void conv2d_backward_direct(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_out,
                            const Tensor& x, const Tensor& weight, const Conv2dParams& p, const Conv2dShape& s,
                            int nthreads) {
  const int64_t n_images = x.size(0), oc = weight.size(0), ckk = weight.size(1);
  const DirectConvPlan plan = make_direct_conv_plan(p, s, oc);
  const float* go = grad_out.data<float>();  // (N, OC, P), planes contiguous
  const float* x_data = x.data<float>();
  const std::vector<float> packed =
      grad_input.defined() ? pack_direct_conv_weight_for_grad_input(plan, weight.data<float>(), oc, weight.stride(0))
                           : std::vector<float>{};
  const int64_t block = oc * ckk;
  std::vector<float> partial(grad_weight.defined() ? nthreads * block : 0);  // (ranges, OC, CKK), zeros

  over_images(nthreads, n_images, [&](int range, int64_t begin, int64_t end) {
    if (begin == end) return;
    DirectConvScratch scratch(plan, oc, grad_weight.defined(), grad_input.defined());
    for (int64_t n = begin; n < end; ++n) {
      load_direct_conv_grad(plan, oc, go + n * grad_out.stride(0), grad_out.stride(1), scratch);
      if (grad_weight.defined()) {
        load_direct_conv_image(plan, x_data + n * x.stride(0), x.stride(1), x.stride(2), x.stride(3), scratch);
        direct_conv_grad_weight_image(plan, oc, scratch);
      }
      if (grad_input.defined()) {
        direct_conv_grad_input_image(plan, packed, oc, grad_input.data<float>() + n * grad_input.stride(0),
                                     grad_input.stride(1), grad_input.stride(2), grad_input.stride(3), scratch);
      }
    }
    if (grad_weight.defined()) direct_conv_grad_weight_sum(scratch, partial.data() + range * block);
  });

  if (grad_weight.defined()) sum_partial_grad_weights(partial, nthreads, /*transposed=*/false, grad_weight);
}

template <class T>
void conv2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_out,
                            const Tensor& x, const Tensor& weight, const Conv2dParams& p, const Conv2dShape& s) {
  CpuBackend& cpu = backend();
  const int64_t n_images = x.size(0), oc = weight.size(0), ckk = weight.size(1), positions = s.output.h * s.output.w;
  const T* w = weight.data<T>();       // (OC, CKK)
  const T* go = grad_out.data<T>();    // (N, OC, P), planes contiguous
  const int64_t gos0 = grad_out.stride(0), gos1 = grad_out.stride(1);
  const double products = double(grad_input.defined()) + double(grad_weight.defined());
  const int nthreads = threads_for_images(n_images, 2.0 * products * double(oc) * double(ckk) * double(positions));
  if constexpr (std::is_same_v<T, float>) {
    if (direct_conv_applies(p, s) && weight.stride(1) == 1)
      return conv2d_backward_direct(grad_input, grad_weight, grad_out, x, weight, p, s, nthreads);
  }

  // Each range sums its images' grad_weight into a block of its own, stored
  // transposed, (CKK, OC): as cols[n] (CKK, P) @ grad_out[n]^T (P, OC) the
  // GEMM reads cols[n] in place and packs only grad_out[n], where the
  // (OC, CKK) orientation would pack cols[n]^T, the larger operand (LeNet
  // conv2: 0.33 vs 0.48 ms per batch). The blocks are added in range order
  // afterwards, so the result does not depend on thread timing.
  const int64_t block = oc * ckk;
  std::vector<T> partial(grad_weight.defined() ? nthreads * block : 0);  // (ranges, CKK, OC), zeros

  over_images(nthreads, n_images, [&](int range, int64_t begin, int64_t end) {
    if (begin == end) return;
    // (1, CKK, P): cols[n] for grad_weight, then reused for grad_input's columns.
    Tensor cols = Tensor::empty({1, ckk, positions}, x.dtype());
    T* cols_data = cols.data<T>();
    for (int64_t n = begin; n < end; ++n) {
      const T* go_n = go + n * gos0;  // (OC, P)
      if (grad_weight.defined()) {
        cpu.im2col(cols, x.slice(0, n, n + 1), p, s);
        // grad_out[n]^T is read through swapped strides: (P, OC) with rows 1 apart.
        gemm<T>(ckk, oc, positions, cols_data, positions, 1, go_n, 1, gos1, n == begin ? T(0) : T(1),
                partial.data() + range * block, oc);
      }
      if (grad_input.defined()) {
        // weight^T (CKK, OC) through swapped strides; K = OC is small, so
        // this product is bound by writing the columns, not by arithmetic.
        gemm<T>(ckk, positions, oc, w, weight.stride(1), weight.stride(0), go_n, gos1, 1, T(0), cols_data, positions);
        cpu.col2im(grad_input.slice(0, n, n + 1), cols, p, s);
      }
    }
  });

  if (grad_weight.defined()) sum_partial_grad_weights(partial, nthreads, /*transposed=*/true, grad_weight);
}
}  // namespace

void CpuBackend::conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& p, const Conv2dShape& s) {
  switch (x.dtype()) {
    case DType::Float32: return conv2d_kernel<float>(out, x, weight, bias, p, s);
    case DType::Float64: return conv2d_kernel<double>(out, x, weight, bias, p, s);
    default: KILN_FAIL("conv2d: the CPU kernel takes float32 or float64, got ", dtype_name(x.dtype()));
  }
}

void CpuBackend::conv2d_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                 const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                                 const Conv2dShape& s) {
  KILN_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64,
             "conv2d_backward: the CPU kernel takes float32 or float64, got ", dtype_name(x.dtype()));
  if (grad_input.defined() || grad_weight.defined()) {
    if (x.dtype() == DType::Float32) {
      conv2d_backward_kernel<float>(grad_input, grad_weight, grad_out, x, weight, p, s);
    } else {
      conv2d_backward_kernel<double>(grad_input, grad_weight, grad_out, x, weight, p, s);
    }
  }
  // The bias gradient: the reduction's own blocked sum (tensor/cpu/reduce.cpp).
  if (grad_bias.defined()) reduce(ReduceOp::Sum, grad_bias.view({1, grad_bias.size(0), 1, 1}), grad_out, {0, 2, 3});
}

}  // namespace kiln::cpu
