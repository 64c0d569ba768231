// Process-wide numeric settings of the CUDA backend.
//
// TF32: on Ampere and later GPUs a float32 GEMM can round its inputs to
// TF32 (10 mantissa bits) inside the tensor cores, several times faster and
// with about 1e-3 relative error instead of 1e-6. Kiln keeps it off by
// default so that CUDA float32 results agree with the CPU backend's to
// float32 precision; a training run that wants the speed turns it on:
//   kiln::cuda::set_allow_tf32(true);
// It applies to float32 GEMMs (cuBLAS) and convolutions (cuDNN) started
// after the call, from any thread. This header needs no CUDA headers.
#pragma once

#include <cstdint>

namespace kiln::cuda {

void set_allow_tf32(bool allow);
bool allow_tf32();

// Which kernels run 2-d convolutions (Note [Direct CUDA convolution] in
// conv_direct.h): Kiln's own direct kernels for float32 and float64 layers
// whose weight fits in a block's shared memory, cuDNN for the others (the
// default: on an H100 they beat cuDNN on LeNet's layers, docs/BENCHMARKS.md),
// or cuDNN for every layer. The starting value comes from
// KILN_CUDA_CONV=kiln|cudnn.
enum class ConvImplementation { Cudnn, Kiln };
void set_conv_implementation(ConvImplementation implementation);
ConvImplementation conv_implementation();

// Which cuDNN interface runs the convolutions cuDNN runs (Note [cuDNN graph
// API] in tensor/cuda/cudnn_graph.cpp): the graph API with an execution plan
// built once per layer shape (the default: the same kernels at a third of
// the host's cost per call on an H100), or the legacy calls. The starting
// value comes from KILN_CUDNN_API=graph|legacy.
enum class CudnnApi { Legacy, Graph };
void set_cudnn_api(CudnnApi api);
CudnnApi cudnn_api();

// How many convolution directions this process has run through the graph
// API: a test's proof that the graph API, not its legacy fallback, ran.
// Defined with the CUDA backend.
int64_t cudnn_graph_runs();

// How many float16/bfloat16 convolution directions (a forward, a data or a
// filter gradient) this process has computed on float32 copies because
// cuDNN declined every algorithm for the 16-bit layer (Note [16-bit cuDNN
// convolutions] in tensor/cuda/conv.cpp): 0 when cuDNN ran them all in 16
// bits, as it should for common layers. Defined with the CUDA backend.
int64_t conv_float32_fallbacks();

}  // namespace kiln::cuda
