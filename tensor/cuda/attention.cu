// CUDA fused attention, forward and backward, with the semantics of the CPU
// kernel (Note [Fused attention] in tensor/attention.h): the same causal
// alignment, masks, zero rows and the same dropout mask, since both draw it
// from attention_dropout_keep.
//
// One warp per row, the (Tq, Tk) scores never stored:
// - forward: a warp owns query i. Its 32 lanes score 32 keys at a time
//   (lane t: q_i . k_{j0+t}, q_i read from shared memory), fold them into the
//   running max and sum (online softmax), and then add p_t v_{j0+t} to the
//   output, lane u owning output columns u, u + 32, ... in registers, with
//   p_t broadcast by a shuffle, so the reads of v are coalesced.
// - backward, three kernels and no atomics: delta_i = rowsum(dO * O); a warp
//   per query accumulates dQ_i = scale * sum_j dS_ij k_j; a warp per key
//   accumulates dK_j = scale * sum_i dS_ij q_i and dV_j = sum_i P'_ij dO_i,
//   lanes scoring 32 queries at a time. Each recomputes
//   P_ij = exp(s_ij - lse_i) from the saved logsumexp; dS is computed twice
//   (once per kernel), which costs less than atomics or a (Tq, Tk) buffer.
// Every (B, H, T, X) tensor is read and written through its (B, H, T)
// strides with its last dim contiguous (Note [Attention layouts]), so a
// lane's loads along a row stay coalesced whatever the layout around it.
// Sums are taken in the compute type (float for float32 and 16-bit, double
// for float64). Head dims up to kCudaAttentionMaxHeadDim: a lane holds up to
// 8 columns of its row's accumulators in registers.
//
// Kiln's own kernels; cuDNN's fused attention (its graph API) is the
// alternative the issue names, not built yet.
#include "tensor/attention.h"
#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/math.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;

template <class C>
__device__ inline C warp_sum(C v) {
  for (int delta = kWarp / 2; delta > 0; delta /= 2) v += __shfl_xor_sync(kFullMask, v, delta);
  return v;
}
template <class C>
__device__ inline C warp_max(C v) {
  for (int delta = kWarp / 2; delta > 0; delta /= 2) {
    const C other = __shfl_xor_sync(kFullMask, v, delta);
    v = other > v ? other : v;
  }
  return v;
}

// A (B, H, T, X) tensor with its last dim contiguous: row i of batch-head
// bh starts at row(bh, i), and rows are `rs` apart.
template <class T>
struct Rows {
  T* data;
  int64_t h, sb, sh, rs;
  __device__ T* row(int64_t bh, int64_t i) const { return data + (bh / h) * sb + (bh % h) * sh + i * rs; }
};

// Sizes, scalars and the mask of one call, passed by value to every kernel.
template <class T, class C>
struct Problem {
  int64_t b, h, tq, tk, d, dv;
  C scale;
  bool causal;
  // The mask: `keep` (Bool) or `add` (floating, T) or neither; strides of
  // (B, H, Tq, Tk), 0 where it broadcasts.
  const bool* keep;
  const T* add;
  int64_t mb, mh, mi, mj;
  // Dropout (threshold 0: none).
  uint32_t threshold;
  C keep_scale;
  uint64_t seed, offset;

  // Keys [0, key_end(i)) may be attended by query i.
  __device__ int64_t key_end(int64_t i) const { return causal ? (i + 1 < tk ? i + 1 : tk) : tk; }

  // s plus the mask of (bh, i, j): -inf where not attended.
  __device__ C masked(C s, int64_t bh, int64_t i, int64_t j) const {
    if (causal && j > i) return negative_infinity<C>();
    const int64_t at = (bh / h) * mb + (bh % h) * mh + i * mi + j * mj;
    if (keep) return keep[at] ? s : negative_infinity<C>();
    if (add) return s + to_compute(add[at]);
    return s;
  }

  // The dropout factor of probability (bh, i, j): 0 or keep_scale.
  __device__ C dropout_factor(int64_t bh, int64_t i, int64_t j) const {
    if (threshold == 0) return C(1);
    const uint64_t e = static_cast<uint64_t>((bh * tq + i) * tk + j);
    return ops::attention_dropout_keep(seed, offset, e, threshold) ? keep_scale : C(0);
  }
};

// The dot product of a row in shared memory (n values) with a row in global memory.
template <class T, class C>
__device__ inline C dot_row(const C* shared_row, const T* row, int64_t n) {
  C acc = 0;
  for (int64_t x = 0; x < n; ++x) acc += shared_row[x] * to_compute(row[x]);
  return acc;
}

// Copies a row of n values into this warp's shared memory, in the compute type.
template <class T, class C>
__device__ inline void load_row(C* shared_row, const T* row, int64_t n, int lane) {
  for (int64_t x = lane; x < n; x += kWarp) shared_row[x] = to_compute(row[x]);
  __syncwarp();
}

// ---- forward: a warp per query row; kCols accumulator columns per lane ----
// q (BH, Tq, D), k (BH, Tk, D), v (BH, Tk, Dv), out (BH, Tq, Dv) as Rows (last dim contiguous),
// lse (BH, Tq) contiguous.
template <class T, class C, class L, int kCols>
__global__ void attention_forward_kernel(Rows<T> out, L* lse, Rows<const T> q, Rows<const T> k, Rows<const T> v,
                                         Problem<T, C> pb) {
  extern __shared__ unsigned char shared_bytes[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  C* q_row = reinterpret_cast<C*>(shared_bytes) + warp * pb.d;  // (D)
  const int64_t rows = pb.b * pb.h * pb.tq;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t bh = row / pb.tq, i = row % pb.tq;
    const T* kh = k.row(bh, 0);  // (Tk, D), rows k.rs apart
    const T* vh = v.row(bh, 0);  // (Tk, Dv), rows v.rs apart
    __syncwarp();
    load_row(q_row, q.row(bh, i), pb.d, lane);
    C m = negative_infinity<C>(), l = 0, o[kCols] = {};
    const int64_t j_end = pb.key_end(i);
    for (int64_t j0 = 0; j0 < j_end; j0 += kWarp) {
      const int64_t j = j0 + lane;
      C s = negative_infinity<C>();
      if (j < j_end) s = pb.masked(pb.scale * dot_row(q_row, kh + j * k.rs, pb.d), bh, i, j);
      const C new_max = max_of(m, warp_max(s));
      if (new_max == negative_infinity<C>()) continue;  // nothing attended yet (the same on every lane)
      C p = j < j_end ? exp_of(s - new_max) : C(0);
      const C rescale = exp_of(m - new_max);
      l = l * rescale + warp_sum(p);
      m = new_max;
#pragma unroll
      for (int u = 0; u < kCols; ++u) o[u] *= rescale;
      if (j < j_end) p *= pb.dropout_factor(bh, i, j);
      const int64_t count = j_end - j0 < kWarp ? j_end - j0 : kWarp;
      for (int t = 0; t < count; ++t) {
        const C pt = __shfl_sync(kFullMask, p, t);
        const T* vrow = vh + (j0 + t) * v.rs;
#pragma unroll
        for (int u = 0; u < kCols; ++u) {
          const int64_t x = lane + u * kWarp;
          if (x < pb.dv) o[u] += pt * to_compute(vrow[x]);
        }
      }
    }
    const C inv = l > C(0) ? C(1) / l : C(0);  // attends to nothing: zeros
    T* orow = out.row(bh, i);
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int64_t x = lane + u * kWarp;
      if (x < pb.dv) orow[x] = from_compute<T>(o[u] * inv);
    }
    if (lane == 0) lse[row] = l > C(0) ? static_cast<L>(m + log_of(l)) : static_cast<L>(negative_infinity<C>());
  }
}

// ---- backward ----

// delta (BH * Tq) = rowsum(dO * O), a warp per row.
template <class T, class C>
__global__ void attention_delta_kernel(C* delta, Rows<const T> dout, Rows<const T> out, int64_t tq, int64_t rows,
                                       int64_t dv) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const T *dorow = dout.row(row / tq, row % tq), *orow = out.row(row / tq, row % tq);
    C acc = 0;
    for (int64_t x = lane; x < dv; x += kWarp) acc += to_compute(dorow[x]) * to_compute(orow[x]);
    acc = warp_sum(acc);
    if (lane == 0) delta[row] = acc;
  }
}

// dS_ij (before the scale) and the kept probability P'_ij = P_ij * F_ij, for
// query i (row q_row, gradient row do_row in shared memory) and key j.
template <class T, class C>
struct ScoreGrad {
  C ds, kept;
};
template <class T, class C, class L>
__device__ inline ScoreGrad<T, C> score_grad(const Problem<T, C>& pb, int64_t bh, int64_t i, int64_t j,
                                             const C* q_row, const C* do_row, const T* k_row, const T* v_row,
                                             L row_lse, C row_delta) {
  if (row_lse == static_cast<L>(negative_infinity<C>())) return {C(0), C(0)};  // attends to nothing
  const C s = pb.masked(pb.scale * dot_row(q_row, k_row, pb.d), bh, i, j);
  const C p = exp_of(s - static_cast<C>(row_lse));
  const C f = pb.dropout_factor(bh, i, j);
  const C dp = dot_row(do_row, v_row, pb.dv) * f;
  return {p * (dp - row_delta), p * f};
}

// dQ: a warp per query row.
template <class T, class C, class L, int kCols>
__global__ void attention_grad_q_kernel(Rows<T> grad_q, Rows<const T> dout, Rows<const T> q, Rows<const T> k,
                                        Rows<const T> v, const L* lse, const C* delta, Problem<T, C> pb) {
  extern __shared__ unsigned char shared_bytes[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  C* q_row = reinterpret_cast<C*>(shared_bytes) + warp * (pb.d + pb.dv);  // (D)
  C* do_row = q_row + pb.d;                                                // (Dv)
  const int64_t rows = pb.b * pb.h * pb.tq;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t bh = row / pb.tq, i = row % pb.tq;
    const T* kh = k.row(bh, 0);  // (Tk, D), rows k.rs apart
    const T* vh = v.row(bh, 0);  // (Tk, Dv), rows v.rs apart
    __syncwarp();
    load_row(q_row, q.row(bh, i), pb.d, lane);
    load_row(do_row, dout.row(bh, i), pb.dv, lane);
    C acc[kCols] = {};
    const int64_t j_end = pb.key_end(i);
    for (int64_t j0 = 0; j0 < j_end; j0 += kWarp) {
      const int64_t j = j0 + lane;
      C ds = 0;
      if (j < j_end) ds = score_grad(pb, bh, i, j, q_row, do_row, kh + j * k.rs, vh + j * v.rs, lse[row], delta[row]).ds;
      const int64_t count = j_end - j0 < kWarp ? j_end - j0 : kWarp;
      for (int t = 0; t < count; ++t) {
        const C dst = __shfl_sync(kFullMask, ds, t);
        const T* krow = kh + (j0 + t) * k.rs;
#pragma unroll
        for (int u = 0; u < kCols; ++u) {
          const int64_t x = lane + u * kWarp;
          if (x < pb.d) acc[u] += dst * to_compute(krow[x]);
        }
      }
    }
    T* dqrow = grad_q.row(bh, i);
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int64_t x = lane + u * kWarp;
      if (x < pb.d) dqrow[x] = from_compute<T>(acc[u] * pb.scale);
    }
  }
}

// dK and dV: a warp per key row, lanes taking 32 queries at a time.
template <class T, class C, class L, int kCols>
__global__ void attention_grad_kv_kernel(Rows<T> grad_k, Rows<T> grad_v, Rows<const T> dout, Rows<const T> q,
                                         Rows<const T> k, Rows<const T> v, const L* lse, const C* delta,
                                         Problem<T, C> pb) {
  extern __shared__ unsigned char shared_bytes[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  // This warp's scratch: the query row and gradient row of each lane's
  // query would not fit, so each lane reads its own from global memory.
  const int64_t rows = pb.b * pb.h * pb.tk;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t bh = row / pb.tk, j = row % pb.tk;
    const T* qh = q.row(bh, 0);      // (Tq, D), rows q.rs apart
    const T* doh = dout.row(bh, 0);  // (Tq, Dv), rows dout.rs apart
    C* k_row = reinterpret_cast<C*>(shared_bytes) + warp * (pb.d + pb.dv);  // (D)
    C* v_row = k_row + pb.d;                                                // (Dv)
    __syncwarp();
    load_row(k_row, k.row(bh, j), pb.d, lane);
    load_row(v_row, v.row(bh, j), pb.dv, lane);
    C dk[kCols] = {}, dv[kCols] = {};
    const int64_t i_begin = pb.causal ? j : 0;  // queries i >= j see key j
    for (int64_t i0 = i_begin; i0 < pb.tq; i0 += kWarp) {
      const int64_t i = i0 + lane;
      ScoreGrad<T, C> g{C(0), C(0)};
      if (i < pb.tq) {
        const int64_t qrow = bh * pb.tq + i;
        // score_grad with the roles of the shared and global rows swapped:
        // here the key and value rows are shared, the query's are global.
        if (lse[qrow] != static_cast<L>(negative_infinity<C>())) {
          const C s = pb.masked(pb.scale * dot_row(k_row, qh + i * q.rs, pb.d), bh, i, j);
          const C p = exp_of(s - static_cast<C>(lse[qrow]));
          const C f = pb.dropout_factor(bh, i, j);
          const C dp = dot_row(v_row, doh + i * dout.rs, pb.dv) * f;
          g = {p * (dp - delta[qrow]), p * f};
        }
      }
      const int64_t count = pb.tq - i0 < kWarp ? pb.tq - i0 : kWarp;
      for (int t = 0; t < count; ++t) {
        const C dst = __shfl_sync(kFullMask, g.ds, t), kept = __shfl_sync(kFullMask, g.kept, t);
        const T* qrow = qh + (i0 + t) * q.rs;
        const T* dorow = doh + (i0 + t) * dout.rs;
#pragma unroll
        for (int u = 0; u < kCols; ++u) {
          const int64_t x = lane + u * kWarp;
          if (x < pb.d) dk[u] += dst * to_compute(qrow[x]);
          if (x < pb.dv) dv[u] += kept * to_compute(dorow[x]);
        }
      }
    }
    T *dkrow = grad_k.row(bh, j), *dvrow = grad_v.row(bh, j);
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int64_t x = lane + u * kWarp;
      if (x < pb.d) dkrow[x] = from_compute<T>(dk[u] * pb.scale);
      if (x < pb.dv) dvrow[x] = from_compute<T>(dv[u]);
    }
  }
}

// ---- host side ----

template <class T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T, class C = Compute<T>>
Problem<DeviceType<T>, C> problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                     const AttentionParams& params) {
  using D = DeviceType<T>;
  Problem<D, C> pb{};
  pb.b = q.size(0);
  pb.h = q.size(1);
  pb.tq = q.size(2);
  pb.tk = k.size(2);
  pb.d = q.size(3);
  pb.dv = v.size(3);
  pb.scale = static_cast<C>(params.scale);
  pb.causal = params.causal;
  pb.keep = nullptr;
  pb.add = nullptr;
  if (mask.defined()) {
    pb.mb = mask.stride(0);
    pb.mh = mask.stride(1);
    pb.mi = mask.stride(2);
    pb.mj = mask.stride(3);
    if (mask.dtype() == DType::Bool) {
      pb.keep = mask.data<bool>();
    } else {
      pb.add = static_cast<const D*>(mask.data_ptr());
    }
  }
  pb.threshold = params.dropout_p > 0 ? ops::attention_dropout_threshold(params.dropout_p) : 0;
  pb.keep_scale = static_cast<C>(ops::attention_dropout_scale(pb.threshold));
  pb.seed = params.seed;
  pb.offset = params.offset;
  return pb;
}

// t (B, H, T, X) as the kernels address it; its last dim must be contiguous.
template <class T>
Rows<T> rows_of(const Tensor& t, const char* op) {
  KILN_CHECK(t.dim() == 4 && (t.size(3) <= 1 || t.stride(3) == 1), op,
             ": expected (B, H, T, X) tensors with their last dim contiguous, got shape ", t.shape(), " and strides ",
             t.strides());
  return {static_cast<T*>(t.data_ptr()), t.size(1), t.stride(0), t.stride(1), t.stride(2)};
}

// Accumulator columns per lane for head dims up to `dim`: 1, 2, 4 or 8.
int columns_per_lane(int64_t dim) {
  KILN_CHECK(dim <= ops::kCudaAttentionMaxHeadDim, "attention: the CUDA kernel takes head dims up to ",
             ops::kCudaAttentionMaxHeadDim, ", got ", dim);
  const int64_t needed = ceil_div(std::max<int64_t>(dim, 1), kWarp);
  return needed <= 1 ? 1 : needed <= 2 ? 2 : needed <= 4 ? 4 : 8;
}

// Calls fn.template operator()<kCols>() for the accumulator width.
template <class Fn>
void with_columns(int columns, Fn&& fn) {
  switch (columns) {
    case 1: return fn.template operator()<1>();
    case 2: return fn.template operator()<2>();
    case 4: return fn.template operator()<4>();
    default: return fn.template operator()<8>();
  }
}

unsigned blocks_for_rows(int64_t rows) {
  return static_cast<unsigned>(std::min(ceil_div(rows, kWarpsPerBlock), kMaxBlocks));
}

template <class T>
void forward_typed(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& mask, const AttentionParams& params) {
  using D = DeviceType<T>;
  using C = Compute<T>;
  using L = C;  // the logsumexp: float32, or float64 for float64
  const auto pb = problem_of<T>(q, k, v, mask, params);
  const int64_t rows = pb.b * pb.h * pb.tq;
  if (rows == 0) return;
  cudaStream_t stream = current_raw_stream(q.device());
  const size_t shared = sizeof(C) * kWarpsPerBlock * static_cast<size_t>(pb.d);
  with_columns(columns_per_lane(pb.dv), [&]<int kCols>() {
    attention_forward_kernel<D, C, L, kCols><<<blocks_for_rows(rows), kWarpsPerBlock * kWarp, shared, stream>>>(
        rows_of<D>(out, "attention"), static_cast<L*>(logsumexp.data_ptr()), rows_of<const D>(q, "attention"),
        rows_of<const D>(k, "attention"), rows_of<const D>(v, "attention"), pb);
    KILN_CUDA_CHECK_LAUNCH("attention_forward_kernel");
  });
}

template <class T>
void backward_typed(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v, const Tensor& grad_out,
                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                    const Tensor& mask, const AttentionParams& params) {
  using D = DeviceType<T>;
  using C = Compute<T>;
  using L = C;
  const auto pb = problem_of<T>(q, k, v, mask, params);
  const int64_t q_rows = pb.b * pb.h * pb.tq, k_rows = pb.b * pb.h * pb.tk;
  cudaStream_t stream = current_raw_stream(q.device());
  constexpr const char* kOp = "attention_backward";
  const Rows<const D> dop = rows_of<const D>(grad_out, kOp), qp = rows_of<const D>(q, kOp),
                      kp = rows_of<const D>(k, kOp), vp = rows_of<const D>(v, kOp), op = rows_of<const D>(out, kOp);
  const Rows<D> dqp = rows_of<D>(grad_q, kOp), dkp = rows_of<D>(grad_k, kOp), dvp = rows_of<D>(grad_v, kOp);
  const L* lp = static_cast<const L*>(logsumexp.data_ptr());
  // delta: (BH * Tq) in the compute type.
  Tensor delta = Tensor::empty({std::max<int64_t>(q_rows, 1)}, {dtype_of<C>(), q.device()});
  C* deltap = static_cast<C*>(delta.data_ptr());
  const size_t shared = sizeof(C) * kWarpsPerBlock * static_cast<size_t>(pb.d + pb.dv);
  with_columns(std::max(columns_per_lane(pb.d), columns_per_lane(pb.dv)), [&]<int kCols>() {
    if (q_rows > 0) {
      attention_delta_kernel<D, C><<<blocks_for_rows(q_rows), kWarpsPerBlock * kWarp, 0, stream>>>(
          deltap, dop, op, pb.tq, q_rows, pb.dv);
      KILN_CUDA_CHECK_LAUNCH("attention_delta_kernel");
      attention_grad_q_kernel<D, C, L, kCols><<<blocks_for_rows(q_rows), kWarpsPerBlock * kWarp, shared, stream>>>(
          dqp, dop, qp, kp, vp, lp, deltap, pb);
      KILN_CUDA_CHECK_LAUNCH("attention_grad_q_kernel");
    }
    if (k_rows > 0) {
      attention_grad_kv_kernel<D, C, L, kCols><<<blocks_for_rows(k_rows), kWarpsPerBlock * kWarp, shared, stream>>>(
          dkp, dvp, dop, qp, kp, vp, lp, deltap, pb);
      KILN_CUDA_CHECK_LAUNCH("attention_grad_kv_kernel");
    }
  });
}

}  // namespace

void CudaBackend::attention(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& mask, const AttentionParams& params) {
  visit_floating_dtype(q.dtype(), "attention", [&]<class T>() {
    DeviceGuard guard(q.device(), "attention");
    forward_typed<T>(out, logsumexp, q, k, v, mask, params);
  });
}

void CudaBackend::attention_backward(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                     const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& logsumexp, const Tensor& mask,
                                     const AttentionParams& params) {
  visit_floating_dtype(q.dtype(), "attention_backward", [&]<class T>() {
    DeviceGuard guard(q.device(), "attention_backward");
    backward_typed<T>(grad_q, grad_k, grad_v, grad_out, q, k, v, out, logsumexp, mask, params);
  });
}

}  // namespace kiln::cuda
