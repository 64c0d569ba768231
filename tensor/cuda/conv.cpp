// CUDA 2-d convolution through Kiln's direct kernels for the small layers
// they take (Note [Direct CUDA convolution] in conv_direct.h), or cuDNN (its
// graph API, Note [cuDNN graph API] in cudnn_graph.cpp, or its legacy calls,
// as cuda::set_conv_implementation and set_cudnn_api choose): one
// group per call, as the front-end (tensor/conv.cpp) makes them, in float32,
// float64, float16 or bfloat16 (Note [16-bit cuDNN convolutions]).
//
// Note [cuDNN convolution algorithms]
// cuDNN has several algorithms per direction (implicit GEMM, FFT, Winograd,
// ...) whose speed depends on the shape. cudnnGet*Algorithm_v7 ranks them
// by cuDNN's heuristics without running anything; the choice is cached per
// key (direction, dtype, TF32 setting, device, every size and stride of the
// three tensors, and the geometry), so the heuristics run once per layer
// shape, not once per step. From the ranking Kiln takes the first algorithm
// that
// - is deterministic (cuDNN's data and filter gradients have variants that
//   sum with atomics; Kiln's results do not depend on scheduling, as its own
//   kernels' do not), falling back to a non-deterministic one only when
//   nothing else is offered;
// - does not use tensor-core math on float32 unless cuda::allow_tf32()
//   (tensor/cuda/settings.h): cuDNN's default math would silently round
//   float32 to TF32 on Ampere and later; CUDNN_FMA_MATH keeps float32 exact
//   (16-bit convolutions are meant for tensor cores: Note [16-bit cuDNN
//   convolutions]);
// - needs at most kMaxConvWorkspaceBytes of workspace (FFT variants can ask for
//   gigabytes). The workspace is a device tensor from Kiln's CUDA allocator.
// The ranking is a guess: an algorithm in it can still decline these
// descriptors or pointers (a status in cuDNN's NOT_SUPPORTED range, or a
// misaligned pointer) when its workspace is queried or when it runs. So the
// first time a key (which holds the pointers' alignment) is seen, the
// acceptable algorithms are tried in ranking order, as torch does, and the
// first that runs is the one cached.
// Tensors reach cuDNN with their strides when every (H, W) plane is
// contiguous, which covers a group's channel slice of a contiguous batch;
// other layouts are copied to contiguous memory first (inputs) or computed
// in a contiguous buffer and copied back (outputs). cuDNN's legacy API takes
// int sizes, so each tensor must have fewer than 2^31 elements.
//
// Note [16-bit cuDNN convolutions]
// Under autocast (Note [Autocast]) conv2d runs in float16 or bfloat16, as
// torch's does: the tensors cuDNN reads and writes are 16-bit, which halves
// the memory traffic and lets it use tensor cores (CUDNN_TENSOR_OP_MATH),
// while the products are summed in float32 (the convolution descriptor's
// compute type; float16 accumulation would lose the small terms of a long
// sum; the backward directions' ALGO_0, which cuDNN's guide says adds
// partial results in the 16-bit type, is never taken). The sums are rounded
// to the 16-bit dtype once, as the CPU's float32 convolution rounded to 16
// bits is, so the two agree to a unit in the last place; but the bias is
// added to the rounded result by cudnnAddTensor and rounded again, so where
// the convolution nearly cancels the bias the CPU's single rounding and
// this double one may differ by half a unit of the convolution's value (a
// large part of a small result). Kiln's direct kernels stay float32/float64,
// so a 16-bit layer always goes to cuDNN. cuDNN's legacy API does not run
// every geometry in 16 bits (bfloat16 least): where it declines every
// algorithm for a 16-bit direction, that direction is computed on float32
// copies of its tensors and the result rounded, which gives the CPU's values;
// cuda::conv_float32_fallbacks() counts those, so a test can see that
// cuDNN really ran a layer in 16 bits.
#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tensor/cuda/conv_direct.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cudnn.h"
#include "tensor/cuda/cudnn_graph.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/settings.h"

namespace kiln::cuda {

namespace {

using Direction = ConvDirection;

// True when cuDNN can take t (N, C, H, W) with its strides (Note [cuDNN
// convolution algorithms]).
bool planes_contiguous(const Tensor& t) {
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  return (w == 1 || t.stride(3) == 1) && (h == 1 || t.stride(2) == w) && (c == 1 || t.stride(1) >= h * w) &&
         (t.size(0) == 1 || t.stride(0) >= c * t.stride(1)) && t.stride(1) > 0 && t.stride(0) > 0;
}

int to_int(int64_t value, const char* op, const char* what) {
  KILN_CHECK(value <= INT_MAX, op, ": ", what, " ", value, " exceeds cuDNN's int limit (", INT_MAX, ")");
  return static_cast<int>(value);
}

// Describes t (N, C, H, W), planes contiguous; a size-1 dim's stride is
// replaced by the packed one, which cuDNN always accepts.
void describe_tensor(const TensorDescriptor& desc, const Tensor& t, const char* op) {
  to_int(t.numel(), op, "tensor size");
  const int64_t hw = t.size(2) * t.size(3);
  const int64_t s1 = t.size(1) == 1 ? hw : t.stride(1);
  const int64_t s0 = t.size(0) == 1 ? t.size(1) * s1 : t.stride(0);
  KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(
      desc.get(), cudnn_data_type(t.dtype()), to_int(t.size(0), op, "batch"), to_int(t.size(1), op, "channels"),
      to_int(t.size(2), op, "height"), to_int(t.size(3), op, "width"), to_int(s0, op, "batch stride"),
      to_int(s1, op, "channel stride"), to_int(t.size(3), op, "row stride"), 1));
}

// The one group's weight (OC, C*kh*kw), contiguous, as (OC, C, kh, kw).
void describe_filter(const FilterDescriptor& desc, const Tensor& weight, const Conv2dShape& s, const char* op) {
  to_int(weight.numel(), op, "weight size");
  KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      desc.get(), cudnn_data_type(weight.dtype()), CUDNN_TENSOR_NCHW, to_int(weight.size(0), op, "output channels"),
      to_int(s.channels, op, "channels"), to_int(s.kernel.h, op, "kernel"), to_int(s.kernel.w, op, "kernel")));
}

// The type cuDNN sums the products in: float32 for the 16-bit dtypes (Note
// [16-bit cuDNN convolutions]), else the data's own.
cudnnDataType_t compute_type(DType dtype) { return is_16_bit(dtype) ? CUDNN_DATA_FLOAT : cudnn_data_type(dtype); }

void describe_convolution(const ConvolutionDescriptor& desc, const Conv2dParams& p, DType dtype, cudnnMathType_t math,
                          const char* op) {
  KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      desc.get(), to_int(p.padding.h, op, "padding"), to_int(p.padding.w, op, "padding"),
      to_int(p.stride.h, op, "stride"), to_int(p.stride.w, op, "stride"), to_int(p.dilation.h, op, "dilation"),
      to_int(p.dilation.w, op, "dilation"), CUDNN_CROSS_CORRELATION, compute_type(dtype)));
  KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(desc.get(), math));
}

// Tensor-core math for float32 only when TF32 is allowed (Note [cuDNN
// convolution algorithms]), for the 16-bit dtypes always (Note [16-bit cuDNN
// convolutions]); float64 has no tensor-core path to avoid.
cudnnMathType_t math_type(DType dtype) {
  if (is_16_bit(dtype)) return CUDNN_TENSOR_OP_MATH;
  if (dtype == DType::Float32 && !allow_tf32()) return CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

// Everything the best algorithm depends on.
std::vector<int64_t> algorithm_key(Direction direction, const Tensor& x, const Tensor& weight, const Tensor& y,
                                   const Conv2dParams& p, const Conv2dShape& s, cudnnMathType_t math) {
  std::vector<int64_t> key{static_cast<int64_t>(direction), static_cast<int64_t>(x.dtype()), math, x.device().index};
  key.insert(key.end(),
             {weight.size(0), s.kernel.h, s.kernel.w, p.stride.h, p.stride.w, p.padding.h, p.padding.w, p.dilation.h,
              p.dilation.w, pointer_alignment(x), pointer_alignment(weight), pointer_alignment(y)});
  for (const Tensor* t : {&x, &y}) {
    key.insert(key.end(), t->shape().begin(), t->shape().end());
    key.insert(key.end(), t->strides().begin(), t->strides().end());
  }
  return key;
}

// A chosen algorithm: one of the three enums, stored as int, or
// kNoneRuns for 16-bit data that no algorithm takes (Note [16-bit cuDNN
// convolutions]); with the workspace it needs, once known. cuDNN 9's
// workspace query costs the host more than the convolution call itself (for
// LeNet's second layer on an H100, 48 to 77 microseconds against 31 to 48:
// bench/cuda_conv_host.cpp), and its answer depends only on what the key
// holds, so it is asked once per key too.
struct Choice {
  int algorithm;
  cudnnMathType_t math;
  std::optional<size_t> workspace_bytes = std::nullopt;
};
constexpr int kNoneRuns = -1;

// Chosen algorithms by key, shared by all threads (Note [cuDNN convolution
// algorithms]). Two threads that meet a new key at once both try the
// ranking and cache the same algorithm.
class AlgorithmCache {
 public:
  std::optional<Choice> find(const std::vector<int64_t>& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = choices_.find(key);
    if (found == choices_.end()) return std::nullopt;
    return found->second;
  }
  void put(const std::vector<int64_t>& key, Choice choice) {
    std::lock_guard<std::mutex> lock(mutex_);
    choices_.emplace(key, choice);
  }

 private:
  std::mutex mutex_;
  std::map<std::vector<int64_t>, Choice> choices_;
};

AlgorithmCache& algorithm_cache() {
  static AlgorithmCache cache;
  return cache;
}

// The acceptable entries of cuDNN's ranking, deterministic ones first (Note
// [cuDNN convolution algorithms]); Perf is one of the three
// cudnnConvolution*AlgoPerf_t, `status` what the ranking call (`call`)
// returned. None when cuDNN declined to rank 16-bit data (Note [16-bit cuDNN
// convolutions]). `sums_in_16_bit` is the direction's algorithm that adds
// partial results in the 16-bit output type (ALGO_0 of the two backward
// directions, by cuDNN's guide), or -1: it is never taken for 16-bit data.
template <class Perf>
std::vector<Choice> acceptable(cudnnStatus_t status, const char* call, DType dtype, const Perf* ranked, int count,
                               cudnnMathType_t math, int sums_in_16_bit = -1) {
  if (cudnn_declined(status) && is_16_bit(dtype)) return {};
  if (status != CUDNN_STATUS_SUCCESS) detail::throw_cudnn_error(status, call, __FILE__, __LINE__);
  std::vector<Choice> choices;
  for (bool deterministic : {true, false}) {
    for (int i = 0; i < count; ++i) {
      const Perf& p = ranked[i];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxConvWorkspaceBytes) continue;
      if ((p.determinism == CUDNN_DETERMINISTIC) != deterministic) continue;
      if (math == CUDNN_FMA_MATH && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
      if (is_16_bit(dtype) && static_cast<int>(p.algo) == sums_in_16_bit) continue;
      choices.push_back({static_cast<int>(p.algo), math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : p.mathType});
    }
  }
  return choices;
}

// A device buffer of `bytes` for cuDNN's scratch, or an undefined tensor for 0.
Tensor workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return Tensor::empty({static_cast<int64_t>(bytes)}, {DType::UInt8, device});
}

void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Runs one direction of the convolution with the algorithm cached for
// `key`, or, for a new key, with each of rank()'s choices in turn until one
// runs, and caches that one (Note [cuDNN convolution algorithms]).
//   workspace_size(algorithm, &bytes) and run(algorithm, scratch, bytes)
// wrap the direction's cuDNN calls (named by `call`) and return their status.
// Returns false when cuDNN declines every algorithm for 16-bit data (the
// caller computes in float32: Note [16-bit cuDNN convolutions]); throws
// kiln::Error when it does for float32 or float64.
template <class Rank, class WorkspaceSize, class Run>
bool run_convolution(const std::vector<int64_t>& key, const ConvolutionDescriptor& conv, DType dtype, Device device,
                     const char* op, const char* call, const Rank& rank, const WorkspaceSize& workspace_size,
                     const Run& run) {
  const std::optional<Choice> cached = algorithm_cache().find(key);
  if (cached && cached->algorithm == kNoneRuns) return false;
  const std::vector<Choice> choices = cached ? std::vector<Choice>{*cached} : rank();
  std::string declines;
  for (const Choice& choice : choices) {
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), choice.math));
    size_t bytes = choice.workspace_bytes.value_or(0);
    cudnnStatus_t status = choice.workspace_bytes ? CUDNN_STATUS_SUCCESS : workspace_size(choice.algorithm, &bytes);
    if (status == CUDNN_STATUS_SUCCESS && bytes > kMaxConvWorkspaceBytes) status = CUDNN_STATUS_NOT_SUPPORTED;
    if (status == CUDNN_STATUS_SUCCESS) {
      Tensor scratch = workspace(bytes, device);
      status = run(choice.algorithm, data_or_null(scratch), bytes);
    }
    if (status == CUDNN_STATUS_SUCCESS) {
      if (!cached) algorithm_cache().put(key, {choice.algorithm, choice.math, bytes});
      return true;
    }
    if (!cudnn_declined(status)) detail::throw_cudnn_error(status, call, __FILE__, __LINE__);
    declines += kiln::detail::str(declines.empty() ? "" : ", ", "algorithm ", choice.algorithm, ": ",
                                  cudnnGetErrorString(status));
  }
  if (is_16_bit(dtype)) {
    if (!cached) algorithm_cache().put(key, {kNoneRuns, CUDNN_DEFAULT_MATH});
    return false;
  }
  KILN_CHECK(!choices.empty(), op, ": cuDNN offers no algorithm for this ", dtype_name(dtype),
             " convolution (none it ranked is usable within a workspace of ", kMaxConvWorkspaceBytes >> 20, " MiB)");
  KILN_FAIL(op, ": cuDNN declined every algorithm it ranked for this ", dtype_name(dtype), " convolution (", declines,
            ")");
}

// 1 and 0 in the type cuDNN wants for alpha and beta: double for float64
// data, float otherwise (16-bit data included).
struct Scaling {
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool wide;
  explicit Scaling(DType dtype) : wide(dtype == DType::Float64) {}
  const void* one() const { return wide ? static_cast<const void*>(&one64) : &one32; }
  const void* zero() const { return wide ? static_cast<const void*>(&zero64) : &zero32; }
};

// The descriptors shared by the three directions.
struct ConvDescriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  cudnnMathType_t math;

  ConvDescriptors(const Tensor& x_t, const Tensor& weight, const Tensor& y_t, const Conv2dParams& p,
                  const Conv2dShape& s, cudnnMathType_t math, const char* op)
      : math(math) {
    describe_tensor(x, x_t, op);
    describe_tensor(y, y_t, op);
    describe_filter(w, weight, s, op);
    describe_convolution(conv, p, x_t.dtype(), math, op);
  }
};

// t itself when cuDNN can read it in place, else a contiguous copy.
Tensor readable(const Tensor& t) { return planes_contiguous(t) ? t : t.contiguous(); }

// Runs `direction` through the graph API when cuda::cudnn_api() chooses it
// and the graph API takes the layer. Each direction reads math_type once and
// passes it here, to its key and to the legacy descriptors, so that the
// three agree even if cuda::set_allow_tf32 changes meanwhile.
bool ran_with_graph_api(Direction direction, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p,
                        const Conv2dShape& s, cudnnHandle_t handle, cudnnMathType_t math,
                        const std::vector<int64_t>& key) {
  return cudnn_api() == CudnnApi::Graph &&
         run_with_graph_api(direction, x, w, y, p, s, handle, /*allow_tf32=*/math != CUDNN_FMA_MATH, key);
}

// The legacy API's forward (Note [cuDNN convolution algorithms]); false when
// it declines 16-bit data.
bool legacy_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                    const Conv2dShape& s, cudnnMathType_t math, const std::vector<int64_t>& key, cudnnHandle_t handle,
                    const Scaling& scaling) {
  const char* op = "conv2d";
  const Device device = out.device();
  ConvDescriptors d(x, weight, out, p, s, math, op);
  return run_convolution(
      key, d.conv, x.dtype(), device, op, "cudnnConvolutionForward",
      [&] {
        cudnnConvolutionFwdAlgoPerf_t ranked[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int count = 0;
        const cudnnStatus_t status = cudnnGetConvolutionForwardAlgorithm_v7(
            handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, ranked);
        return acceptable(status, "cudnnGetConvolutionForwardAlgorithm_v7", x.dtype(), ranked, count, d.math);
      },
      [&](int algorithm, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algorithm), bytes);
      },
      [&](int algorithm, void* scratch, size_t bytes) {
        return cudnnConvolutionForward(handle, scaling.one(), d.x.get(), x.data_ptr(), d.w.get(), weight.data_ptr(),
                                       d.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(algorithm), scratch, bytes,
                                       scaling.zero(), d.y.get(), out.data_ptr());
      });
}

// The three directions: each returns false, having written nothing, when
// cuDNN declines every algorithm for 16-bit data (run_convolution).
bool forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
             const Conv2dShape& s) {
  const char* op = "conv2d";
  const Device device = out.device();
  cudnnHandle_t handle = cudnn_handle(device);
  const Scaling scaling(x.dtype());
  const cudnnMathType_t math = math_type(x.dtype());
  const std::vector<int64_t> key = algorithm_key(Direction::Forward, x, weight, out, p, s, math);
  if (!ran_with_graph_api(Direction::Forward, x, weight, out, p, s, handle, math, key) &&
      !legacy_forward(out, x, weight, p, s, math, key, handle, scaling)) {
    return false;
  }
  if (bias.defined()) {
    // bias: (OC) seen as (1, OC, 1, 1), added to every position of out.
    Tensor b = bias.contiguous();
    TensorDescriptor bias_desc, out_desc;
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_desc.get(), CUDNN_TENSOR_NCHW, cudnn_data_type(b.dtype()), 1,
                                                to_int(b.numel(), op, "bias size"), 1, 1));
    describe_tensor(out_desc, out, op);
    KILN_CUDNN_CHECK(cudnnAddTensor(handle, scaling.one(), bias_desc.get(), b.data_ptr(), scaling.one(), out_desc.get(),
                                    out.data_ptr()));
  }
  return true;
}

bool backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight, const Conv2dParams& p,
                   const Conv2dShape& s) {
  const char* op = "conv2d_backward";
  const Device device = grad_input.device();
  cudnnHandle_t handle = cudnn_handle(device);
  const cudnnMathType_t math = math_type(grad_input.dtype());
  const std::vector<int64_t> key = algorithm_key(Direction::BackwardData, grad_input, weight, grad_out, p, s, math);
  if (ran_with_graph_api(Direction::BackwardData, grad_input, weight, grad_out, p, s, handle, math, key)) return true;
  ConvDescriptors d(grad_input, weight, grad_out, p, s, math, op);
  const Scaling scaling(grad_input.dtype());
  return run_convolution(
      key, d.conv, grad_input.dtype(), device, op, "cudnnConvolutionBackwardData",
      [&] {
        cudnnConvolutionBwdDataAlgoPerf_t ranked[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int count = 0;
        const cudnnStatus_t status =
            cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, ranked);
        return acceptable(status, "cudnnGetConvolutionBackwardDataAlgorithm_v7", grad_input.dtype(), ranked, count,
                          d.math, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
      },
      [&](int algorithm, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm),
                                                            bytes);
      },
      [&](int algorithm, void* scratch, size_t bytes) {
        return cudnnConvolutionBackwardData(handle, scaling.one(), d.w.get(), weight.data_ptr(), d.y.get(),
                                            grad_out.data_ptr(), d.conv.get(),
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm), scratch, bytes,
                                            scaling.zero(), d.x.get(), grad_input.data_ptr());
      });
}

bool backward_filter(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                     const Conv2dShape& s) {
  const char* op = "conv2d_backward";
  const Device device = grad_weight.device();
  cudnnHandle_t handle = cudnn_handle(device);
  const cudnnMathType_t math = math_type(x.dtype());
  const std::vector<int64_t> key = algorithm_key(Direction::BackwardFilter, x, grad_weight, grad_out, p, s, math);
  if (ran_with_graph_api(Direction::BackwardFilter, x, grad_weight, grad_out, p, s, handle, math, key)) return true;
  ConvDescriptors d(x, grad_weight, grad_out, p, s, math, op);
  const Scaling scaling(x.dtype());
  return run_convolution(
      key, d.conv, x.dtype(), device, op, "cudnnConvolutionBackwardFilter",
      [&] {
        cudnnConvolutionBwdFilterAlgoPerf_t ranked[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int count = 0;
        const cudnnStatus_t status =
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, ranked);
        return acceptable(status, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", x.dtype(), ranked, count, d.math,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
      },
      [&](int algorithm, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm),
                                                              bytes);
      },
      [&](int algorithm, void* scratch, size_t bytes) {
        return cudnnConvolutionBackwardFilter(handle, scaling.one(), d.x.get(), x.data_ptr(), d.y.get(),
                                              grad_out.data_ptr(), d.conv.get(),
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm), scratch, bytes,
                                              scaling.zero(), d.w.get(), grad_weight.data_ptr());
      });
}

// Kiln's direct kernels when they are chosen and take the layer (Note
// [Direct CUDA convolution] in conv_direct.h), else cuDNN.
bool use_direct_kernels(int64_t out_channels, const Conv2dParams& p, const Conv2dShape& s, DType dtype) {
  return conv_implementation() == ConvImplementation::Kiln && direct_conv_applies(out_channels, p, s, dtype);
}

// compute(result) with result `target` itself when `in_place`, else a
// contiguous tensor of its shape whose values are then copied into it (a
// layout the kernels cannot write).
template <class Compute>
void write_into(const Tensor& target, bool in_place, const Compute& compute) {
  const Tensor result = in_place ? target : Tensor::empty(target.shape(), {target.dtype(), target.device()});
  compute(result);
  if (!result.is_same(target)) Tensor(target).copy_(result);  // a handle to target's storage
}

// direction(result, inputs) for one of forward, backward_data and
// backward_filter; where it declines 16-bit data, the same on float32 copies
// of the inputs, rounded into result (Note [16-bit cuDNN convolutions]).
// Undefined inputs (a missing bias) stay undefined.
std::atomic<int64_t> float32_fallbacks{0};

template <class Direction>
void in_float32_where_declined(const Tensor& result, const std::vector<Tensor>& inputs, const Direction& direction) {
  if (direction(result, inputs)) return;
  float32_fallbacks.fetch_add(1, std::memory_order_relaxed);
  std::vector<Tensor> wide;
  for (const Tensor& t : inputs) wide.push_back(t.defined() ? t.to(DType::Float32) : t);
  const Tensor wide_result = Tensor::empty(result.shape(), {DType::Float32, result.device()});
  (void)direction(wide_result, wide);  // float32: runs or throws
  Tensor(result).copy_(wide_result);   // a handle to result's storage
}

void check_dtype(DType dtype, const char* op) {
  KILN_CHECK(is_floating(dtype), op, ": the CUDA convolution takes float32, float64, float16 or bfloat16, got ",
             dtype_name(dtype));
}

}  // namespace

bool CudaBackend::conv2d_takes(DType dtype) const { return is_floating(dtype); }

int64_t conv_float32_fallbacks() { return float32_fallbacks.load(std::memory_order_relaxed); }

void CudaBackend::conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Conv2dParams& p, const Conv2dShape& s) {
  check_dtype(x.dtype(), "conv2d");
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device(), "conv2d");
  // out: (N, OC, oh, ow)
  if (use_direct_kernels(weight.size(0), p, s, x.dtype())) {
    write_into(out, out.is_contiguous(), [&](const Tensor& result) {
      direct_conv2d_forward(result, x.contiguous(), weight.contiguous(), bias.defined() ? bias.contiguous() : bias, p,
                            s);
    });
    return;
  }
  write_into(out, planes_contiguous(out), [&](const Tensor& result) {
    in_float32_where_declined(
        result, {readable(x), weight.contiguous(), bias},
        [&](const Tensor& r, const std::vector<Tensor>& in) { return forward(r, in[0], in[1], in[2], p, s); });
  });
}

void CudaBackend::conv2d_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                  const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                                  const Conv2dShape& s) {
  check_dtype(x.dtype(), "conv2d_backward");
  if (!grad_input.defined() && !grad_weight.defined() && !grad_bias.defined()) return;
  DeviceGuard guard(x.device(), "conv2d_backward");
  if (x.size(0) == 0) {
    // An empty batch contributes nothing: the weight's and the bias's
    // gradients are sums of no terms.
    if (grad_weight.defined()) fill(grad_weight, Scalar(0));
    if (grad_bias.defined()) fill(grad_bias, Scalar(0));
    return;
  }
  // grad_input: (N, C, H, W); grad_weight: (OC, C*kh*kw), written packed;
  // grad_bias: (OC), in the direct kernels' weight pass when they run it.
  const bool direct = use_direct_kernels(weight.size(0), p, s, x.dtype());
  const bool bias_with_weight = direct && grad_weight.defined() && grad_bias.defined() && grad_bias.is_contiguous();
  const Tensor dy = direct ? grad_out.contiguous() : readable(grad_out);  // (N, OC, oh, ow)
  if (grad_input.defined()) {
    write_into(
        grad_input, direct ? grad_input.is_contiguous() : planes_contiguous(grad_input), [&](const Tensor& result) {
          if (direct) {
            direct_conv2d_grad_input(result, dy, weight.contiguous(), p, s);
          } else {
            in_float32_where_declined(
                result, {dy, weight.contiguous()},
                [&](const Tensor& r, const std::vector<Tensor>& in) { return backward_data(r, in[0], in[1], p, s); });
          }
        });
  }
  if (grad_weight.defined()) {
    write_into(grad_weight, grad_weight.is_contiguous(), [&](const Tensor& result) {
      if (direct) {
        direct_conv2d_grad_weight(result, bias_with_weight ? grad_bias : Tensor(), dy, x.contiguous(), p, s);
      } else {
        in_float32_where_declined(result, {dy, readable(x)}, [&](const Tensor& r, const std::vector<Tensor>& in) {
          return backward_filter(r, in[0], in[1], p, s);
        });
      }
    });
  }
  // The bias gradient, unless the direct kernels' weight pass made it: the
  // sum over (N, oh, ow) by the reduction kernels (reduce.cu), which write
  // any layout.
  if (grad_bias.defined() && !bias_with_weight) {
    reduce(ReduceOp::Sum, grad_bias.view({1, grad_bias.size(0), 1, 1}), dy, {0, 2, 3});
  }
}

}  // namespace kiln::cuda
