// CUDA reductions: sum, prod, max and min over any set of dims, and max/min
// along one dim with the index of the first extreme. Layouts and kernel
// choice: Note [CUDA reduction layouts] (tensor/cuda/reduce.cuh).
//
// Accumulation follows the backend contract (tensor/backend.h): integer and
// bool sums and products in int64; floating sums and products in double. The
// CPU sums float32 blocks in float32 and only their totals in double (Note
// [Blocked summation]); here every element goes straight into a double,
// which costs nothing a memory-bound kernel notices and is at least as
// accurate, so the two agree to float32 rounding.
#include <cuda/std/limits>
#include <functional>
#include <type_traits>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/math.cuh"
#include "tensor/cuda/reduce.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

// ---- folds: what a reduction combines, and where its result goes ----
// A fold has In (the input's device type), Acc, identity(), load(x, r) for
// element r of a row, combine(a, b), and write(out_offsets, acc), where
// out_offsets are the element offsets of one output in each output tensor.

template <ReduceOp Op, class T>
struct ValueFold {
  using In = T;
  using Value = decltype(to_compute(std::declval<T>()));
  static constexpr bool kArithmetic = Op == ReduceOp::Sum || Op == ReduceOp::Prod;
  static constexpr bool kFloating = std::is_floating_point_v<Value>;
  using Acc = std::conditional_t<kArithmetic, std::conditional_t<kFloating, double, int64_t>, Value>;
  using Out = std::conditional_t<kArithmetic && !kFloating, int64_t, T>;

  Out* out;

  __device__ Acc identity() const {
    if constexpr (Op == ReduceOp::Sum) {
      return Acc(0);
    } else if constexpr (Op == ReduceOp::Prod) {
      return Acc(1);
    } else if constexpr (kFloating) {
      return Op == ReduceOp::Max ? -::cuda::std::numeric_limits<Acc>::infinity()
                                 : ::cuda::std::numeric_limits<Acc>::infinity();
    } else {
      return Op == ReduceOp::Max ? ::cuda::std::numeric_limits<Acc>::lowest() : ::cuda::std::numeric_limits<Acc>::max();
    }
  }
  __device__ Acc load(T x, int64_t) const { return static_cast<Acc>(to_compute(x)); }
  __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (Op == ReduceOp::Sum) {
      return static_cast<Acc>(a + b);
    } else if constexpr (Op == ReduceOp::Prod) {
      return static_cast<Acc>(a * b);
    } else {
      // NaN wins, as torch.max; which NaN does not matter.
      bool wins = Op == ReduceOp::Max ? b > a : b < a;
      return wins || is_nan(b) ? b : a;
    }
  }
  __device__ void write(const int64_t* offsets, Acc a) const { out[offsets[0]] = from_compute<Out>(a); }
};

template <class V>
struct ValueIndex {
  V value;
  int64_t index;
};

// The first extreme and its index: a NaN beats any number, and between
// equals (or two NaNs) the smaller index wins. That makes combine
// commutative and associative, so any tree order finds torch's answer.
template <ReduceOp Op, class T>
struct IndexFold {
  using In = T;
  using Value = decltype(to_compute(std::declval<T>()));
  using Acc = ValueIndex<Value>;

  T* values;
  int64_t* indices;

  __device__ Acc identity() const {
    Value v;
    if constexpr (std::is_floating_point_v<Value>) {
      v = Op == ReduceOp::Max ? -::cuda::std::numeric_limits<Value>::infinity()
                              : ::cuda::std::numeric_limits<Value>::infinity();
    } else {
      v = Op == ReduceOp::Max ? ::cuda::std::numeric_limits<Value>::lowest()
                              : ::cuda::std::numeric_limits<Value>::max();
    }
    return {v, ::cuda::std::numeric_limits<int64_t>::max()};
  }
  __device__ Acc load(T x, int64_t r) const { return {to_compute(x), r}; }
  __device__ Acc combine(Acc a, Acc b) const {
    bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return b.index < a.index ? b : a;
      return a_nan ? a : b;
    }
    if (Op == ReduceOp::Max ? b.value > a.value : b.value < a.value) return b;
    if (b.value == a.value && b.index < a.index) return b;
    return a;
  }
  __device__ void write(const int64_t* offsets, Acc a) const {
    values[offsets[0]] = from_compute<T>(a.value);
    indices[offsets[1]] = a.index;
  }
};

// ---- kernels ----

// One thread per output o (kept: offsets {in, outputs...}); blockIdx.y is a
// split of each row into split_len elements. With one split the result is
// written, otherwise it goes to partial: (n_out, splits).
template <class P, int K>
__global__ void reduce_threads_kernel(P p, const typename P::In* in, StridedOffsets<K> kept, StridedOffsets<1> reduced,
                                      int64_t n_out, int64_t row_len, int64_t split_len, typename P::Acc* partial) {
  const int64_t split = blockIdx.y, splits = gridDim.y;
  const int64_t first = split * split_len;
  const int64_t last = first + split_len < row_len ? first + split_len : row_len;
  for (int64_t o = global_thread_index(); o < n_out; o += grid_stride()) {
    int64_t offsets[K];
    strided_offsets(kept, o, n_out, offsets);
    typename P::Acc acc = p.identity();
    // Unrolled so that several independent loads are in flight per thread.
#pragma unroll 4
    for (int64_t r = first; r < last; ++r) {
      int64_t at[1];
      strided_offsets(reduced, r, row_len, at);
      acc = p.combine(acc, p.load(in[offsets[0] + at[0]], r));
    }
    if (splits == 1) {
      p.write(offsets + 1, acc);
    } else {
      partial[o * splits + split] = acc;
    }
  }
}

// One group of kGroup threads (a warp, or the whole block) per unit =
// (output, chunk of chunk_len row elements). With one chunk the result is
// written, otherwise it goes to partial: (n_out, chunks).
template <class P, int K, int kGroup>
__global__ void reduce_groups_kernel(P p, const typename P::In* in, StridedOffsets<K> kept, StridedOffsets<1> reduced,
                                     int64_t n_out, int64_t row_len, int64_t chunk_len, int64_t chunks,
                                     typename P::Acc* partial) {
  using Acc = typename P::Acc;
  constexpr int kGroupsPerBlock = kReduceThreads / kGroup;
  const int rank = threadIdx.x % kGroup;
  const int64_t units = n_out * chunks;
  auto combine = [&](Acc a, Acc b) { return p.combine(a, b); };
  // The loop bound is the same for every thread of a group, so whole groups
  // reach the shuffles and barriers together.
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + threadIdx.x / kGroup; u < units;
       u += static_cast<int64_t>(gridDim.x) * kGroupsPerBlock) {
    const int64_t o = u / chunks, chunk = u % chunks;
    int64_t offsets[K];
    strided_offsets(kept, o, n_out, offsets);
    const int64_t first = chunk * chunk_len;
    const int64_t last = first + chunk_len < row_len ? first + chunk_len : row_len;
    Acc acc = p.identity();
#pragma unroll 4
    for (int64_t r = first + rank; r < last; r += kGroup) {
      int64_t at[1];
      strided_offsets(reduced, r, row_len, at);
      acc = p.combine(acc, p.load(in[offsets[0] + at[0]], r));
    }
    if constexpr (kGroup == kWarpThreads) {
      acc = warp_reduce(acc, combine);
    } else {
      acc = block_reduce(acc, combine, p.identity());
    }
    if (rank == 0) {
      if (chunks == 1) {
        p.write(offsets + 1, acc);
      } else {
        partial[u] = acc;
      }
    }
  }
}

// The second pass: output o combines partial[o, 0..parts) with one block.
template <class P, int K>
__global__ void reduce_partials_kernel(P p, const typename P::Acc* partial, StridedOffsets<K> kept, int64_t n_out,
                                       int64_t parts) {
  using Acc = typename P::Acc;
  auto combine = [&](Acc a, Acc b) { return p.combine(a, b); };
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    Acc acc = p.identity();
    for (int64_t i = threadIdx.x; i < parts; i += kReduceThreads) acc = p.combine(acc, partial[o * parts + i]);
    acc = block_reduce(acc, combine, p.identity());
    if (threadIdx.x == 0) {
      int64_t offsets[K];
      kept.offsets(o, offsets);
      p.write(offsets + 1, acc);
    }
  }
}

// ---- host side ----

// Outputs that, below this count, make the threads kernel split its rows.
constexpr int64_t kThreadsTarget = int64_t{1} << 17;
// A thread's loads along its row follow one another (a few in flight), so
// a split is kept short: a linear layer's bias gradient at batch 512, 512
// rows of 120 outputs, is 32 splits of 16 rows rather than 8 of 64. Rows of
// at most kUnsplitRows are not split at all: a second launch costs the host
// more than the few loads it would save (LeNet's eager step at batch 64 is
// bound by the host: docs/BENCHMARKS.md).
constexpr int64_t kMinSplitLen = 16;
constexpr int64_t kUnsplitRows = 128;

// Runs fold p over the plan (kept: {in, outputs...}; reduced: {in}) on
// `device`'s current stream. False, launching nothing, when the layout has
// too many dims for the kernels.
template <class P, int K>
bool run_reduction(const P& p, const typename P::In* in, const DimList<K>& kept, const DimList<1>& reduced,
                   Device device) {
  using Acc = typename P::Acc;
  StridedOffsets<K> kept_offsets;
  StridedOffsets<1> reduced_offsets;
  if (!kept.to_offsets(kept_offsets) || !reduced.to_offsets(reduced_offsets)) return false;
  const int64_t n_out = kept.numel(), row_len = reduced.numel();
  if (n_out == 0) return true;
  cudaStream_t stream = current_raw_stream(device);
  auto workspace = [&](int64_t parts) {
    return Tensor::empty({n_out * parts * static_cast<int64_t>(sizeof(Acc))}, {DType::UInt8, device});
  };
  auto finish = [&](const Tensor& partial, int64_t parts) {
    unsigned blocks = static_cast<unsigned>(std::min(n_out, kMaxBlocks));
    reduce_partials_kernel<P, K><<<blocks, kReduceThreads, 0, stream>>>(p, static_cast<const Acc*>(partial.data_ptr()),
                                                                        kept_offsets, n_out, parts);
    KILN_CUDA_CHECK_LAUNCH("reduce_partials_kernel");
  };

  const bool contiguous_rows = reduced.inner_stride(0) == 1;
  const bool coalesced_columns = kept.inner_stride(0) == 1;
  if (row_len >= kWarpThreads && (contiguous_rows || !coalesced_columns)) {
    if (row_len <= kWarpRowLimit) {
      constexpr int64_t kWarpsPerBlock = kReduceThreads / kWarpThreads;
      unsigned blocks = static_cast<unsigned>(std::min(ceil_div(n_out, kWarpsPerBlock), kMaxBlocks));
      reduce_groups_kernel<P, K, kWarpThreads><<<blocks, kReduceThreads, 0, stream>>>(
          p, in, kept_offsets, reduced_offsets, n_out, row_len, row_len, 1, nullptr);
      KILN_CUDA_CHECK_LAUNCH("reduce_groups_kernel");
      return true;
    }
    const int64_t chunks = ceil_div(row_len, kBlockChunk);
    Tensor partial = chunks > 1 ? workspace(chunks) : Tensor();
    unsigned blocks = static_cast<unsigned>(std::min(n_out * chunks, kMaxBlocks));
    reduce_groups_kernel<P, K, kReduceThreads>
        <<<blocks, kReduceThreads, 0, stream>>>(p, in, kept_offsets, reduced_offsets, n_out, row_len, kBlockChunk,
                                                chunks, chunks > 1 ? static_cast<Acc*>(partial.data_ptr()) : nullptr);
    KILN_CUDA_CHECK_LAUNCH("reduce_groups_kernel");
    if (chunks > 1) finish(partial, chunks);
    return true;
  }
  // Enough threads to fill the GPU: split rows when outputs are few.
  int64_t splits = 1;
  if (n_out < kThreadsTarget && row_len > kUnsplitRows) {
    splits = std::min({ceil_div(kThreadsTarget, n_out), row_len / kMinSplitLen, int64_t{65535}});
  }
  const int64_t split_len = std::max<int64_t>(ceil_div(row_len, splits), 1);
  splits = std::max<int64_t>(ceil_div(row_len, split_len), 1);
  Tensor partial = splits > 1 ? workspace(splits) : Tensor();
  dim3 grid(static_cast<unsigned>(std::min(ceil_div(n_out, kReduceThreads), kMaxBlocks)),
            static_cast<unsigned>(splits));
  reduce_threads_kernel<P, K>
      <<<grid, kReduceThreads, 0, stream>>>(p, in, kept_offsets, reduced_offsets, n_out, row_len, split_len,
                                            splits > 1 ? static_cast<Acc*>(partial.data_ptr()) : nullptr);
  KILN_CUDA_CHECK_LAUNCH("reduce_threads_kernel");
  if (splits > 1) finish(partial, splits);
  return true;
}

// outputs[k] has in's rank with size 1 in every dim of `dims` (sorted).
// Builds the plan and runs p; a layout with too many dims is permuted so
// the reduced dims are last, packed, and reduced into packed outputs that
// are then copied back.
template <class P, int K>
void reduce_layout(const P& p, const Tensor& in, const std::array<Tensor, K - 1>& outputs, const Shape& dims,
                   const std::function<P(const std::array<Tensor, K - 1>&)>& fold_for) {
  DimList<K> kept;
  DimList<1> reduced;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (std::binary_search(dims.begin(), dims.end(), d)) {
      reduced.add(in.size(d), {in.stride(d)});
    } else {
      std::array<int64_t, K> strides;
      strides[0] = in.stride(d);
      for (int k = 0; k + 1 < K; ++k) strides[k + 1] = outputs[k].stride(d);
      kept.add(in.size(d), strides);
    }
  }
  kept.sort_and_merge();
  reduced.sort_and_merge();
  if (run_reduction<P, K>(p, static_cast<const typename P::In*>(in.data_ptr()), kept, reduced, in.device())) return;

  Shape order = reduced_last_order(in.dim(), dims);
  Tensor packed = in.permute(order).contiguous();
  std::array<Tensor, K - 1> packed_outputs;
  for (int k = 0; k + 1 < K; ++k)
    packed_outputs[k] = Tensor::empty(outputs[k].permute(order).shape(), {outputs[k].dtype(), in.device()});
  Shape packed_dims;
  for (int64_t d = in.dim() - static_cast<int64_t>(dims.size()); d < in.dim(); ++d) packed_dims.push_back(d);
  // Contiguous operands with the reduced dims last merge to at most 2 dims.
  reduce_layout<P, K>(fold_for(packed_outputs), packed, packed_outputs, packed_dims, fold_for);
  for (int k = 0; k + 1 < K; ++k) backend().copy(outputs[k].permute(order), packed_outputs[k]);
}

template <ReduceOp Op, class T>
void reduce_typed(const Tensor& out, const Tensor& in, const Shape& dims) {
  using P = ValueFold<Op, DeviceType<T>>;
  using HostOut = std::conditional_t<std::is_same_v<typename P::Out, int64_t>, int64_t, T>;
  KILN_CHECK(out.dtype() == dtype_of<HostOut>(), "reduce: expected a ", dtype_of<HostOut>(), " output for a ",
             in.dtype(), " input, got ", out.dtype());
  if (out.numel() == 0) return;
  if (Op == ReduceOp::Max || Op == ReduceOp::Min) {
    KILN_CHECK(in.numel() != 0, "reduce: max/min over an empty dim");
  }
  DeviceGuard guard(in.device(), "reduce");
  auto fold_for = [](const std::array<Tensor, 1>& o) { return P{static_cast<typename P::Out*>(o[0].data_ptr())}; };
  reduce_layout<P, 2>(fold_for({out}), in, {out}, dims, fold_for);
}

template <ReduceOp Op>
void reduce_op(const Tensor& out, const Tensor& in, const Shape& dims) {
  visit_dtype(in.dtype(), [&]<class T>() { reduce_typed<Op, T>(out, in, dims); });
}

template <ReduceOp Op, class T>
void reduce_with_index_typed(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  using P = IndexFold<Op, DeviceType<T>>;
  if (values.numel() == 0) return;
  KILN_CHECK(in.size(dim) != 0, "reduce_with_index: max/min over an empty dim");
  DeviceGuard guard(in.device(), Op == ReduceOp::Max ? "max" : "min");
  auto fold_for = [](const std::array<Tensor, 2>& o) {
    return P{static_cast<typename P::In*>(o[0].data_ptr()), static_cast<int64_t*>(o[1].data_ptr())};
  };
  reduce_layout<P, 3>(fold_for({values, indices}), in, {values, indices}, {dim}, fold_for);
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) {
  switch (op) {
    case ReduceOp::Sum:
      return reduce_op<ReduceOp::Sum>(out, in, dims);
    case ReduceOp::Prod:
      return reduce_op<ReduceOp::Prod>(out, in, dims);
    case ReduceOp::Max:
      return reduce_op<ReduceOp::Max>(out, in, dims);
    case ReduceOp::Min:
      return reduce_op<ReduceOp::Min>(out, in, dims);
  }
  KILN_FAIL("reduce: invalid op code ", static_cast<int>(op));
}

void CudaBackend::reduce_with_index(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in,
                                    int64_t dim) {
  KILN_CHECK(op == ReduceOp::Max || op == ReduceOp::Min, "reduce_with_index: expected Max or Min, got op code ",
             static_cast<int>(op));
  visit_dtype(in.dtype(), [&]<class T>() {
    if (op == ReduceOp::Max) {
      reduce_with_index_typed<ReduceOp::Max, T>(values, indices, in, dim);
    } else {
      reduce_with_index_typed<ReduceOp::Min, T>(values, indices, in, dim);
    }
  });
}

}  // namespace kiln::cuda
