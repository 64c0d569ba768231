// CUDA topk and multinomial: the launchers of the kernels in
// tensor/cuda/select_kernels.cuh (how they work is told there), which give
// the CPU's results (tensor/cpu/select.cpp) bit for bit. One block per row;
// the grid shrinks so that the blocks' scratch stays within kScratchBytes,
// each block then walking several rows.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/kernel_errors.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/select_kernels.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/multinomial_draw.h"

namespace kiln::cuda {

namespace {

using select_kernels::KeyOf;

// Scratch per launch (topk's chosen pairs, multinomial's rows left to draw from).
constexpr int64_t kScratchBytes = int64_t{64} << 20;

// Blocks for `rows` rows, one row each, when each block needs
// `bytes_per_block` of scratch.
unsigned blocks_for(int64_t rows, int64_t bytes_per_block) {
  const int64_t fit = std::max<int64_t>(1, kScratchBytes / std::max<int64_t>(bytes_per_block, 1));
  return static_cast<unsigned>(std::min({rows, kMaxBlocks, fit}));
}

// in: (rows, n); values, indices: (rows, k).
template <class T>
void launch_topk(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest,
                 cudaStream_t stream) {
  using D = DeviceType<T>;
  using K = KeyOf<D>;
  const int64_t rows = in.size(0), n = in.size(1);
  int64_t padded = 1;
  while (padded < k) padded <<= 1;
  const unsigned blocks = blocks_for(rows, padded * static_cast<int64_t>(sizeof(K) + sizeof(int64_t)));
  // keys: (blocks, padded) K, held in an Int64 tensor (8 bytes fit either key width); slots: (blocks, padded).
  Tensor keys = Tensor::empty({static_cast<int64_t>(blocks) * padded}, {DType::Int64, in.device()});
  Tensor slots = Tensor::empty({static_cast<int64_t>(blocks) * padded}, {DType::Int64, in.device()});
  select_kernels::topk_kernel<D><<<blocks, select_kernels::kThreads, 0, stream>>>(
      static_cast<D*>(values.data_ptr()), indices.data<int64_t>(), static_cast<const D*>(in.data_ptr()), rows, n, k,
      largest, static_cast<K*>(keys.data_ptr()), slots.data<int64_t>(), padded);
  KILN_CUDA_CHECK_LAUNCH("topk_kernel");
}

// probs: (rows, n); out: (rows, num_samples).
template <class T>
void launch_multinomial(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                        uint64_t offset, cudaStream_t stream) {
  using D = DeviceType<T>;
  static_assert(select_kernels::kThreads == multinomial_draw::kSegments, "a thread per segment");
  const int64_t rows = probs.size(0), n = probs.size(1);
  const unsigned blocks = blocks_for(rows, replacement ? 0 : n * static_cast<int64_t>(sizeof(double)));
  Tensor left;  // (blocks, n), without replacement
  if (!replacement) left = Tensor::empty({static_cast<int64_t>(blocks) * n}, {DType::Float64, probs.device()});
  const ErrorSlot problem = watch_kernel_errors(probs.device(), stream, [](const KernelErrorValues& v) {
    return multinomial_draw::error_message(v[0], v[1], v[2]);
  });
  select_kernels::multinomial_kernel<D><<<blocks, select_kernels::kThreads, 0, stream>>>(
      out.data<int64_t>(), static_cast<const D*>(probs.data_ptr()), replacement ? nullptr : left.data<double>(), rows,
      n, num_samples, replacement, seed, offset, problem);
  KILN_CUDA_CHECK_LAUNCH("multinomial_kernel");
}

}  // namespace

void CudaBackend::topk(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest) {
  if (values.numel() == 0) return;
  DeviceGuard guard(in.device(), "topk");
  cudaStream_t stream = current_raw_stream(in.device());
  visit_dtype(in.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      KILN_FAIL("topk: expected a numeric tensor, got bool");
    } else {
      launch_topk<T>(values, indices, in, k, largest, stream);
    }
  });
}

void CudaBackend::multinomial(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement,
                              uint64_t seed, uint64_t offset) {
  if (out.numel() == 0) return;
  DeviceGuard guard(probs.device(), "multinomial");
  cudaStream_t stream = current_raw_stream(probs.device());
  visit_floating_dtype(probs.dtype(), "multinomial", [&]<class T>() {
    launch_multinomial<T>(out, probs, num_samples, replacement, seed, offset, stream);
  });
}

}  // namespace kiln::cuda
