// The CUDA backend's numeric settings (tensor/cuda/settings.h).
#include "tensor/cuda/settings.h"

#include <atomic>
#include <cstdlib>
#include <string>

namespace kiln::cuda {

namespace {
// Relaxed: the flag orders nothing else; a GEMM racing a change may take
// either value, as a GEMM started just before or after it would.
std::atomic<bool> tf32_allowed{false};

ConvImplementation implementation_from_environment() {
  const char* value = std::getenv("KILN_CUDA_CONV");
  return value != nullptr && std::string(value) == "cudnn" ? ConvImplementation::Cudnn : ConvImplementation::Kiln;
}
std::atomic<ConvImplementation> conv_choice{implementation_from_environment()};

CudnnApi cudnn_api_from_environment() {
  const char* value = std::getenv("KILN_CUDNN_API");
  return value != nullptr && std::string(value) == "legacy" ? CudnnApi::Legacy : CudnnApi::Graph;
}
std::atomic<CudnnApi> cudnn_api_choice{cudnn_api_from_environment()};
}  // namespace

void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }

bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

void set_conv_implementation(ConvImplementation implementation) {
  conv_choice.store(implementation, std::memory_order_relaxed);
}

ConvImplementation conv_implementation() { return conv_choice.load(std::memory_order_relaxed); }

void set_cudnn_api(CudnnApi api) { cudnn_api_choice.store(api, std::memory_order_relaxed); }

CudnnApi cudnn_api() { return cudnn_api_choice.load(std::memory_order_relaxed); }

}  // namespace kiln::cuda
