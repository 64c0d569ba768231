// The CUDA backend's numeric settings (tensor/cuda/settings.h).
#include "tensor/cuda/settings.h"

#include <atomic>

namespace kiln::cuda {

namespace {
// Relaxed: the flag orders nothing else; a GEMM racing a change may take
// either value, as a GEMM started just before or after it would.
std::atomic<bool> tf32_allowed{false};
}  // namespace

void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }

bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

}  // namespace kiln::cuda
