// CUDA fused optimizer steps (Note [Fused optimizer steps] in
// tensor/fused_optim.h): SGD and Adam/AdamW over all parameters in one or a
// few kernel launches.
//
// Note [Multi-tensor launches]
// A model has tens to hundreds of parameter tensors, many of them small
// (biases, norms); one launch each would cost more in launch overhead than
// the update itself. As PyTorch's multi_tensor_apply, one launch takes up to
// kTensorsPerLaunch tensors, whose pointers, sizes and per-tensor scalars
// travel in the kernel's parameters (a struct well under the 4 KiB limit).
// Each tensor is cut into chunks of kChunk elements and each block updates
// one chunk: block b finds its tensor among the launch's prefix sums of
// chunk counts. Big and small tensors thus share one grid, and a model with
// up to kTensorsPerLaunch parameters per dtype takes one launch.
//
// Every statement is one of the unfused ops, in their order, rounded to T as
// the op's output; the scalars are rounded to T on the host as the ops wrap
// them. The _rn intrinsics keep nvcc from contracting a product and a sum
// into one fused multiply-add, so the results are bitwise the CPU's
// (tensor/cpu/optim_step.cpp, compiled without FMA) and the unfused ops'.
#include <cmath>
#include <vector>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

constexpr int kTensorsPerLaunch = 32;
// Elements per block: 4 per thread. Each thread's updates run one after
// another, each waiting for its loads, so a small chunk (many blocks, few
// elements each) is what keeps the step short. With 16384 (64 per thread)
// LeNet's 62,006 parameters made 12 blocks, and its SGD step took 34 to 74
// microseconds on an H100; with 1024, 70 blocks and 5 to 8 microseconds
// (bench/lenet --device cuda under bench/cuda_kernel_trace.cpp).
constexpr int64_t kChunk = 1024;

// Correctly rounded arithmetic, never contracted.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ inline double sqrt_rn(double a) { return __dsqrt_rn(a); }

// torch.maximum: NaN from either side wins.
template <class T>
__device__ T nan_maximum(T a, T b) {
  if (isnan(a) || isnan(b)) return add_rn(a, b);
  return a < b ? b : a;
}

// The tensors of one launch (Note [Multi-tensor launches]). Pointers that
// an optimizer does not use are null.
template <class T, int kLists>
struct TensorChunks {
  int count = 0;                                   // tensors in this launch
  T* ptr[kLists][kTensorsPerLaunch] = {};          // per list, per tensor: (numel[t])
  int64_t numel[kTensorsPerLaunch] = {};
  int64_t first_block[kTensorsPerLaunch + 1] = {};  // prefix sums of chunk counts
  T scalar[2][kTensorsPerLaunch] = {};              // per-tensor scalars of the step
  bool flag[kTensorsPerLaunch] = {};                // per-tensor flag of the step

  // The tensor that block b works on.
  __device__ int tensor_of(int64_t b) const {
    int t = 0;
    while (t + 1 < count && first_block[t + 1] <= b) ++t;
    return t;
  }
};

// Calls launch(chunks, blocks) for successive groups of at most
// kTensorsPerLaunch of the non-empty tensors among `selected`; fill(chunks,
// slot, i) records tensor i's pointers and scalars in slot `slot`.
template <class T, int kLists, class Fill, class Launch>
void for_each_launch(const std::vector<size_t>& selected, const std::vector<Tensor>& params, const Fill& fill,
                     const Launch& launch) {
  TensorChunks<T, kLists> chunks;
  auto flush = [&] {
    if (chunks.count == 0) return;
    launch(chunks, chunks.first_block[chunks.count]);
    chunks = TensorChunks<T, kLists>{};
  };
  for (size_t i : selected) {
    const int64_t n = params[i].numel();
    if (n == 0) continue;
    const int slot = chunks.count++;
    chunks.numel[slot] = n;
    chunks.first_block[slot + 1] = chunks.first_block[slot] + ceil_div(n, kChunk);
    fill(chunks, slot, i);
    if (chunks.count == kTensorsPerLaunch) flush();
  }
  flush();
}

// The indices of the parameters with dtype T.
template <class T>
std::vector<size_t> params_of_dtype(const std::vector<Tensor>& params) {
  std::vector<size_t> selected;
  const DType dtype = std::is_same_v<T, float> ? DType::Float32 : DType::Float64;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].dtype() == dtype) selected.push_back(i);
  }
  return selected;
}

// ---- SGD ----

// Lists: 0 params, 1 grads, 2 momentum buffers; flag: first step of the
// buffer. The update of optim/sgd.h.
template <class T>
struct SgdScalars {
  T weight_decay, momentum, keep, step;
  bool maximize, decay, buffer, damped, nesterov;
};

template <class T>
__global__ void sgd_kernel(TensorChunks<T, 3> chunks, SgdScalars<T> s) {
  const int t = chunks.tensor_of(blockIdx.x);
  const int64_t begin = (blockIdx.x - chunks.first_block[t]) * kChunk;
  const int64_t end = min(begin + kChunk, chunks.numel[t]);
  T* p = chunks.ptr[0][t];
  const T* g = chunks.ptr[1][t];
  T* b = chunks.ptr[2][t];
  const bool first = chunks.flag[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T d = s.maximize ? -g[i] : g[i];
    if (s.decay) d = add_rn(d, mul_rn(s.weight_decay, p[i]));
    if (s.buffer) {
      if (first) {
        b[i] = d;
      } else {
        const T kept = s.damped ? mul_rn(s.keep, d) : d;
        b[i] = add_rn(mul_rn(b[i], s.momentum), kept);
      }
      d = s.nesterov ? add_rn(d, mul_rn(s.momentum, b[i])) : b[i];
    }
    p[i] = add_rn(p[i], mul_rn(s.step, d));
  }
}

template <class T>
void sgd_step_typed(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& buffers, const std::vector<bool>& first_step, const SgdStep& step,
                    cudaStream_t stream) {
  const SgdScalars<T> s{static_cast<T>(step.weight_decay), static_cast<T>(step.momentum),
                        static_cast<T>(1.0 - step.dampening), static_cast<T>(-step.lr), step.maximize,
                        step.weight_decay != 0.0, !buffers.empty(), 1.0 - step.dampening != 1.0, step.nesterov};
  for_each_launch<T, 3>(
      params_of_dtype<T>(params), params,
      [&](TensorChunks<T, 3>& c, int slot, size_t i) {
        c.ptr[0][slot] = params[i].data<T>();
        c.ptr[1][slot] = grads[i].data<T>();
        c.ptr[2][slot] = buffers.empty() ? nullptr : buffers[i].data<T>();
        c.flag[slot] = !buffers.empty() && first_step[i];
      },
      [&](const TensorChunks<T, 3>& c, int64_t blocks) {
        sgd_kernel<T><<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(c, s);
        KILN_CUDA_CHECK_LAUNCH("sgd_kernel");
      });
}

// ---- Adam / AdamW ----

// Lists: 0 params, 1 grads, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq;
// scalar[0]: sqrt(1 - beta2^t), scalar[1]: -lr / (1 - beta1^t), each
// computed in float64 and rounded to T. The update of optim/adam.h.
template <class T>
struct AdamScalars {
  T beta1, keep1, beta2, keep2, weight_decay, decay_keep, eps;
  bool maximize, decay, decoupled, amsgrad;
};

template <class T>
__global__ void adam_kernel(TensorChunks<T, 5> chunks, AdamScalars<T> s) {
  const int t = chunks.tensor_of(blockIdx.x);
  const int64_t begin = (blockIdx.x - chunks.first_block[t]) * kChunk;
  const int64_t end = min(begin + kChunk, chunks.numel[t]);
  T* p = chunks.ptr[0][t];
  const T* g = chunks.ptr[1][t];
  T* m = chunks.ptr[2][t];
  T* v = chunks.ptr[3][t];
  T* vmax = chunks.ptr[4][t];
  const T bias_correction2_sqrt = chunks.scalar[0][t], neg_step_size = chunks.scalar[1][t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T d = s.maximize ? -g[i] : g[i];
    if (s.decay && s.decoupled) {
      p[i] = mul_rn(p[i], s.decay_keep);
    } else if (s.decay) {
      d = add_rn(d, mul_rn(p[i], s.weight_decay));
    }
    m[i] = add_rn(mul_rn(m[i], s.beta1), mul_rn(d, s.keep1));
    v[i] = add_rn(mul_rn(v[i], s.beta2), mul_rn(mul_rn(d, s.keep2), d));
    T second = v[i];
    if (s.amsgrad) {
      vmax[i] = nan_maximum(vmax[i], v[i]);
      second = vmax[i];
    }
    const T denom = add_rn(div_rn(sqrt_rn(second), bias_correction2_sqrt), s.eps);
    p[i] = add_rn(p[i], div_rn(mul_rn(m[i], neg_step_size), denom));
  }
}

template <class T>
void adam_step_typed(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                     const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& steps,
                     const AdamStep& step, cudaStream_t stream) {
  const AdamScalars<T> s{static_cast<T>(step.beta1),
                         static_cast<T>(1.0 - step.beta1),
                         static_cast<T>(step.beta2),
                         static_cast<T>(1.0 - step.beta2),
                         static_cast<T>(step.weight_decay),
                         static_cast<T>(1.0 - step.lr * step.weight_decay),
                         static_cast<T>(step.eps),
                         step.maximize,
                         step.weight_decay != 0.0,
                         step.decoupled,
                         !max_exp_avg_sqs.empty()};
  for_each_launch<T, 5>(
      params_of_dtype<T>(params), params,
      [&](TensorChunks<T, 5>& c, int slot, size_t i) {
        c.ptr[0][slot] = params[i].data<T>();
        c.ptr[1][slot] = grads[i].data<T>();
        c.ptr[2][slot] = exp_avgs[i].data<T>();
        c.ptr[3][slot] = exp_avg_sqs[i].data<T>();
        c.ptr[4][slot] = max_exp_avg_sqs.empty() ? nullptr : max_exp_avg_sqs[i].data<T>();
        // The bias corrections are float64, as optim/adam.cpp's.
        c.scalar[0][slot] = static_cast<T>(std::sqrt(1.0 - std::pow(step.beta2, steps[i])));
        c.scalar[1][slot] = static_cast<T>(-(step.lr / (1.0 - std::pow(step.beta1, steps[i]))));
      },
      [&](const TensorChunks<T, 5>& c, int64_t blocks) {
        adam_kernel<T><<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(c, s);
        KILN_CUDA_CHECK_LAUNCH("adam_kernel");
      });
}

// ---- the gradient scaler's unscale ----

// List 0: the gradients. found_inf: one float32, set to 1 by any thread that
// meets a non-finite product (they all write the same value).
template <class T>
__global__ void unscale_kernel(TensorChunks<T, 1> chunks, T inv_scale, float* found_inf) {
  const int t = chunks.tensor_of(blockIdx.x);
  const int64_t begin = (blockIdx.x - chunks.first_block[t]) * kChunk;
  const int64_t end = min(begin + kChunk, chunks.numel[t]);
  T* g = chunks.ptr[0][t];
  bool found = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    g[i] = mul_rn(g[i], inv_scale);
    found = found || !isfinite(g[i]);
  }
  if (found) *found_inf = 1.0f;
}

template <class T>
void unscale_typed(const std::vector<Tensor>& grads, double inv_scale, float* found_inf, cudaStream_t stream) {
  for_each_launch<T, 1>(
      params_of_dtype<T>(grads), grads,
      [&](TensorChunks<T, 1>& c, int slot, size_t i) { c.ptr[0][slot] = grads[i].data<T>(); },
      [&](const TensorChunks<T, 1>& c, int64_t blocks) {
        unscale_kernel<T><<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(
            c, static_cast<T>(inv_scale), found_inf);
        KILN_CUDA_CHECK_LAUNCH("unscale_kernel");
      });
}

}  // namespace

void CudaBackend::unscale_grads(const std::vector<Tensor>& grads, double inv_scale, const Tensor& found_inf) {
  if (grads.empty()) return;
  DeviceGuard guard(grads[0].device(), "unscale_grads_");
  cudaStream_t stream = current_raw_stream(grads[0].device());
  unscale_typed<float>(grads, inv_scale, found_inf.data<float>(), stream);
  unscale_typed<double>(grads, inv_scale, found_inf.data<float>(), stream);
}

void CudaBackend::sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_step,
                           const SgdStep& step) {
  if (params.empty()) return;
  DeviceGuard guard(params[0].device(), "sgd_step_");
  cudaStream_t stream = current_raw_stream(params[0].device());
  sgd_step_typed<float>(params, grads, momentum_buffers, first_step, step, stream);
  sgd_step_typed<double>(params, grads, momentum_buffers, first_step, step, stream);
}

void CudaBackend::adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                            const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& steps,
                            const AdamStep& step) {
  if (params.empty()) return;
  DeviceGuard guard(params[0].device(), "adam_step_");
  cudaStream_t stream = current_raw_stream(params[0].device());
  adam_step_typed<float>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, step, stream);
  adam_step_typed<double>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, step, stream);
}

}  // namespace kiln::cuda
