// cuda_conv_host: what one convolution call costs on a GPU, for LeNet's two
// layers at batch 64, where a training step is bound by the host rather
// than by the GPU, and at batch 512, where it is bound by the GPU: the
// host's time per call (what an eager step pays) and the GPU's (what a CUDA
// graph replay pays).
// - host: kCalls calls queued back to back on an idle GPU, without waiting,
//   divided by kCalls (the median of kRepeats). At batch 64 the launch queue
//   holds far more than kCalls calls' kernels, so the host never waits for
//   the GPU; at batch 512 it may fill, and the figure is an upper bound.
// - gpu: the same calls queued behind a large GEMM, so that they run back to
//   back on the GPU once it ends, timed between CUDA events after it.
// For Kiln (ops::conv2d and ops::conv2d_backward through cuDNN's legacy
// calls, through its graph API and through Kiln's direct kernels, and a
// small ops::add for scale), then for raw cuDNN's
// legacy API on layer 2's buffers: the descriptors (create, set, destroy),
// the workspace query and each call Kiln makes.
//     cuda_conv_host layer=2 batch=64 what=kiln_forward_cudnn host_us=.. gpu_us=..
//
// Usage: build/bench/cuda_conv_host
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "kiln.h"
#include "tensor/conv.h"
#include "tensor/cuda/cudnn.h"
#include "tensor/cuda/settings.h"
#include "tensor/cuda/stream.h"

namespace {

using kiln::Tensor;
using Clock = std::chrono::steady_clock;

constexpr int kCalls = 100;
constexpr int kRepeats = 11;

// Median host microseconds per call of `body`.
double host_us(kiln::Device device, const std::function<void()>& body) {
  for (int i = 0; i < 5; ++i) body();
  kiln::cuda::synchronize(device);
  std::vector<double> times;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < kCalls; ++i) body();
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kCalls);
    kiln::cuda::synchronize(device);
  }
  std::sort(times.begin(), times.end());
  return times[kRepeats / 2];
}

// Median GPU microseconds per call of `body`: kCalls calls queued behind a
// GEMM that keeps the GPU busy for longer than the host takes to queue them.
double gpu_us(kiln::Device device, const std::function<void()>& body) {
  static const Tensor big = kiln::ones({8192, 8192}, {kiln::DType::Float32, device});
  const kiln::cuda::Stream stream = kiln::cuda::current_stream(device);
  std::vector<double> times;
  for (int r = 0; r < kRepeats; ++r) {
    Tensor busy = kiln::ops::mm(big, big);  // about 20 ms each on an H100
    busy = kiln::ops::mm(big, busy);
    kiln::cuda::Event start(true), stop(true);
    start.record(stream);
    for (int i = 0; i < kCalls; ++i) body();
    stop.record(stream);
    stop.synchronize();
    times.push_back(1000.0 * start.elapsed_time(stop) / kCalls);
  }
  std::sort(times.begin(), times.end());
  return times[kRepeats / 2];
}

void report(int layer, int64_t batch, const char* what, kiln::Device device, const std::function<void()>& body,
            bool gpu = true) {
  const double host = host_us(device, body);
  if (gpu) {
    std::printf("cuda_conv_host layer=%d batch=%lld what=%s host_us=%.1f gpu_us=%.1f\n", layer,
                static_cast<long long>(batch), what, host, gpu_us(device, body));
  } else {
    std::printf("cuda_conv_host layer=%d batch=%lld what=%s host_us=%.1f\n", layer, static_cast<long long>(batch), what,
                host);
  }
  std::fflush(stdout);
}

#define CHECK(call) KILN_CUDNN_CHECK(call)

}  // namespace

int main() try {
  const kiln::Device device = kiln::cuda_device(0);
  kiln::manual_seed(3);
  const Tensor small_a = kiln::randn({64, 16}).to(device), small_b = kiln::randn({64, 16}).to(device);
  Tensor sink;
  report(0, 64, "kiln_add_64x16", device, [&] { sink = kiln::ops::add(small_a, small_b); });
  // LeNet's layers: x (N, 3, 32, 32), weight (6, 3, 5, 5), and
  // x (N, 6, 14, 14), weight (16, 6, 5, 5); the first needs no grad_input.
  struct Layer {
    int64_t in, out, size;
    bool grad_input;
  };
  for (const int64_t batch : {int64_t{64}, int64_t{512}}) {
    for (const Layer& l : {Layer{3, 6, 32, false}, Layer{6, 16, 14, true}}) {
      const int layer = l.in == 3 ? 1 : 2;
      const Tensor x = kiln::randn({batch, l.in, l.size, l.size}).to(device);
      const Tensor w = kiln::randn({l.out, l.in, 5, 5}).to(device), b = kiln::randn({l.out}).to(device);
      const Tensor dy = kiln::randn({batch, l.out, l.size - 4, l.size - 4}).to(device);
      // cuDNN's legacy calls, cuDNN's graph API (Note [cuDNN graph API]), and
      // Kiln's direct kernels.
      struct Variant {
        const char* forward;
        const char* backward;
        kiln::cuda::ConvImplementation implementation;
        kiln::cuda::CudnnApi api;
      };
      for (const Variant& v : {Variant{"kiln_forward_cudnn", "kiln_backward_cudnn",
                                       kiln::cuda::ConvImplementation::Cudnn, kiln::cuda::CudnnApi::Legacy},
                               Variant{"kiln_forward_cudnn_graph", "kiln_backward_cudnn_graph",
                                       kiln::cuda::ConvImplementation::Cudnn, kiln::cuda::CudnnApi::Graph},
                               Variant{"kiln_forward_direct", "kiln_backward_direct",
                                       kiln::cuda::ConvImplementation::Kiln, kiln::cuda::CudnnApi::Legacy}}) {
        kiln::cuda::set_conv_implementation(v.implementation);
        kiln::cuda::set_cudnn_api(v.api);
        const int64_t graph_runs = kiln::cuda::cudnn_graph_runs();
        report(layer, batch, v.forward, device, [&] { sink = kiln::ops::conv2d(x, w, b); });
        report(layer, batch, v.backward, device, [&] {
          sink = kiln::ops::conv2d_backward(dy, x, w, {}, {l.grad_input, true, true}).grad_weight;
        });
        if (v.api == kiln::cuda::CudnnApi::Graph && kiln::cuda::cudnn_graph_runs() == graph_runs) {
          std::printf("cuda_conv_host layer=%d batch=%lld the graph API declined this layer: the legacy API ran it\n",
                      layer, static_cast<long long>(batch));
        }
      }
    }
  }
  const Tensor x = kiln::randn({64, 6, 14, 14}).to(device);
  const Tensor w = kiln::randn({16, 6, 5, 5}).to(device), b = kiln::randn({16}).to(device);
  const Tensor dy = kiln::randn({64, 16, 10, 10}).to(device);
  Tensor y = kiln::ops::conv2d(x, w, b);

  // Raw cuDNN on the same buffers.
  cudnnHandle_t handle;
  CHECK(cudnnCreate(&handle));
  CHECK(cudnnSetStream(handle, kiln::cuda::current_raw_stream(device)));
  cudnnTensorDescriptor_t xd, yd, bd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  auto create = [&] {
    CHECK(cudnnCreateTensorDescriptor(&xd));
    CHECK(cudnnCreateTensorDescriptor(&yd));
    CHECK(cudnnCreateTensorDescriptor(&bd));
    CHECK(cudnnCreateFilterDescriptor(&wd));
    CHECK(cudnnCreateConvolutionDescriptor(&cd));
    CHECK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 64, 6, 14, 14));
    CHECK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 64, 16, 10, 10));
    CHECK(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 16, 1, 1));
    CHECK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 16, 6, 5, 5));
    CHECK(cudnnSetConvolution2dDescriptor(cd, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CHECK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  };
  auto destroy = [&] {
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyTensorDescriptor(bd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
  };
  report(
      2, 64, "cudnn_descriptors", device,
      [&] {
        create();
        destroy();
      },
      false);
  create();
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, fwd));
  CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, xd, yd, cd, wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                      &count, filt));
  CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, wd, yd, cd, xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                    &count, data));
  std::printf("cuda_conv_host algorithms forward=%d filter=%d data=%d\n", fwd[0].algo, filt[0].algo, data[0].algo);
  size_t bytes = 0, most = 0;
  report(
      2, 64, "cudnn_forward_workspace_query", device,
      [&] { CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, xd, wd, cd, yd, fwd[0].algo, &bytes)); }, false);
  most = std::max({bytes, fwd[0].memory, filt[0].memory, data[0].memory});
  const Tensor scratch = kiln::empty({static_cast<int64_t>(most) + 1}, {kiln::DType::UInt8, device});
  const float one = 1, zero = 0;
  Tensor dx = kiln::empty_like(x), dw = kiln::empty_like(w), db = kiln::empty_like(b);
  report(
      2, 64, "cudnn_forward", device,
      [&] {
        CHECK(cudnnConvolutionForward(handle, &one, xd, x.data_ptr(), wd, w.data_ptr(), cd, fwd[0].algo,
                                      scratch.data_ptr(), most, &zero, yd, y.data_ptr()));
      },
      true);
  report(
      2, 64, "cudnn_add_bias", device,
      [&] { CHECK(cudnnAddTensor(handle, &one, bd, b.data_ptr(), &one, yd, y.data_ptr())); }, true);
  report(
      2, 64, "cudnn_backward_filter", device,
      [&] {
        CHECK(cudnnConvolutionBackwardFilter(handle, &one, xd, x.data_ptr(), yd, dy.data_ptr(), cd, filt[0].algo,
                                             scratch.data_ptr(), most, &zero, wd, dw.data_ptr()));
      },
      true);
  report(
      2, 64, "cudnn_backward_data", device,
      [&] {
        CHECK(cudnnConvolutionBackwardData(handle, &one, wd, w.data_ptr(), yd, dy.data_ptr(), cd, data[0].algo,
                                           scratch.data_ptr(), most, &zero, xd, dx.data_ptr()));
      },
      true);
  report(
      2, 64, "cudnn_backward_bias", device,
      [&] { CHECK(cudnnConvolutionBackwardBias(handle, &one, yd, dy.data_ptr(), &zero, bd, db.data_ptr())); }, true);
  destroy();
  cudnnDestroy(handle);
  return 0;
} catch (const kiln::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
