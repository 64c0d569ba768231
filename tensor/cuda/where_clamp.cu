// CUDA where (select by a Bool condition) and clamp, with the semantics of
// tensor/cpu/where_clamp.cpp.
//
// where only moves elements, so like the CPU kernel it is instantiated per
// element width (B, an unsigned integer as wide as the element), and packs
// its loads as Note [Vectorised elementwise kernels] describes: V elements
// of the values and V condition bytes per thread.
#include <optional>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/elementwise.cuh"

namespace kiln::cuda {

namespace {

// out, cond, a, b: n elements, contiguous, except that a or b may be one
// value broadcast (a_scalar / b_scalar: relu's backward passes where(mask, grad, 0)).
template <int V, class B>
__global__ void where_packed_kernel(B* out, const bool* cond, const B* a, const B* b, bool a_scalar, bool b_scalar,
                                    int64_t n) {
  const B a0 = a_scalar ? a[0] : B{};
  const B b0 = b_scalar ? b[0] : B{};
  const int64_t packs = n / V;
  for (int64_t p = global_thread_index(); p < packs; p += grid_stride()) {
    Pack<bool, V> c = reinterpret_cast<const Pack<bool, V>*>(cond)[p];
    Pack<B, V> x, y, o;
    if (!a_scalar) x = reinterpret_cast<const Pack<B, V>*>(a)[p];
    if (!b_scalar) y = reinterpret_cast<const Pack<B, V>*>(b)[p];
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = c.v[j] ? (a_scalar ? a0 : x.v[j]) : (b_scalar ? b0 : y.v[j]);
    reinterpret_cast<Pack<B, V>*>(out)[p] = o;
  }
  const int64_t i = packs * V + global_thread_index();
  if (i < n) out[i] = cond[i] ? (a_scalar ? a0 : a[i]) : (b_scalar ? b0 : b[i]);
}

// Any strides; layout operands: out, cond, a, b.
template <class B>
__global__ void where_strided_kernel(B* out, const bool* cond, const B* a, const B* b, StridedOffsets<4> layout,
                                     int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[4];
    strided_offsets(layout, i, n, offset);
    out[offset[0]] = cond[offset[1]] ? a[offset[2]] : b[offset[3]];
  }
}

template <class B>
void where_bits(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device(), "where");
  cudaStream_t stream = current_raw_stream(out.device());
  // 16 bytes of values per thread, at most 16 condition bytes.
  constexpr int V = static_cast<int>(16 / sizeof(B));
  const bool a_scalar = is_broadcast_scalar(a), b_scalar = is_broadcast_scalar(b);
  auto dense = [](const Tensor& t, size_t bytes) { return t.is_contiguous() && is_aligned(t.data_ptr(), bytes); };
  bool packed = dense(out, sizeof(Pack<B, V>)) && dense(cond, sizeof(Pack<bool, V>)) &&
                (a_scalar || dense(a, sizeof(Pack<B, V>))) && (b_scalar || dense(b, sizeof(Pack<B, V>)));
  if (packed) {
    where_packed_kernel<V, B><<<grid_for(std::max<int64_t>(n / V, 1)), kThreadsPerBlock, 0, stream>>>(
        static_cast<B*>(out.data_ptr()), static_cast<const bool*>(cond.data_ptr()), static_cast<const B*>(a.data_ptr()),
        static_cast<const B*>(b.data_ptr()), a_scalar, b_scalar, n);
    KILN_CUDA_CHECK_LAUNCH("where_packed_kernel");
    return;
  }
  for_each_strided_launch<4>(
      {out, cond, a, b}, [&](const std::array<Tensor, 4>& part, const StridedOffsets<4>& layout) {
        int64_t part_n = part[0].numel();
        where_strided_kernel<B><<<grid_for(part_n), kThreadsPerBlock, 0, stream>>>(
            static_cast<B*>(part[0].data_ptr()), static_cast<const bool*>(part[1].data_ptr()),
            static_cast<const B*>(part[2].data_ptr()), static_cast<const B*>(part[3].data_ptr()), layout, part_n);
        KILN_CUDA_CHECK_LAUNCH("where_strided_kernel");
      });
}

// max(x, lo) then min(., hi), as torch: lo > hi gives hi everywhere, and a
// NaN in x or in a bound gives NaN.
template <class C>
struct ClampOp {
  C lo, hi;
  bool has_lo, has_hi;
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (x != x) return x;
      if (has_lo && lo != lo) return lo;
      if (has_hi && hi != hi) return hi;
    }
    if (has_lo && x < lo) x = lo;
    if (has_hi && x > hi) x = hi;
    return x;
  }
};

}  // namespace

void CudaBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  switch (out.element_size()) {
    case 1:
      return where_bits<uint8_t>(out, cond, a, b);
    case 2:
      return where_bits<uint16_t>(out, cond, a, b);
    case 4:
      return where_bits<uint32_t>(out, cond, a, b);
    case 8:
      return where_bits<uint64_t>(out, cond, a, b);
  }
  KILN_FAIL("where: unexpected element size ", out.element_size(), " of ", out.dtype());
}

void CudaBackend::clamp(const Tensor& out, const Tensor& in, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      KILN_FAIL("clamp: not supported for bool tensors");
    } else {
      using C = ComputeType<T>;
      // Bounds round to T first, as torch casts them to the tensor's dtype.
      ClampOp<C> op{lo ? static_cast<C>(lo->to<T>()) : C(0), hi ? static_cast<C>(hi->to<T>()) : C(0), lo.has_value(),
                    hi.has_value()};
      launch_elementwise<DeviceType<T>, DeviceType<T>, 1>("clamp", out, {in}, op);
    }
  });
}

}  // namespace kiln::cuda
