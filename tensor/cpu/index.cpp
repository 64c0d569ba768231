// CPU index_select, gather and scatter_add, and check_index_range.
//
// The three ops share one walk. Each has an "indexed" tensor X that is
// addressed through the index along `dim`, an "iterated" tensor Y addressed by
// the position j along `dim`, and the index I, also addressed by j:
//   index_select: Y = out, X = in,  I = index (stride 0 outside dim)
//   gather:       Y = out, X = in,  I = index
//   scatter_add:  Y = src, X = out, I = index   (X[.., I[.., j, ..], ..] += Y[.., j, ..])
// The walk runs a StridedLoop over the "outer" shape, the iteration shape
// with `dim` removed, and inside it over j. Threads split only the outer
// coordinates, and an outer coordinate's X elements are never touched by
// another one, so scatter_add needs no atomics; each X element receives its
// contributions in ascending j on one thread, so the sums are deterministic.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/loops.h"

namespace kiln::cpu {

// Index reads and element moves per thread below which the walk stays serial.
static constexpr int64_t kIndexGrain = 1 << 15;

// `t` viewed with `sizes` (the iteration shape) minus `dim`, keeping t's strides.
static Tensor outer_view(const Tensor& t, const Shape& sizes, int64_t dim) {
  Shape outer_sizes = sizes, outer_strides = t.strides();
  outer_sizes.erase(outer_sizes.begin() + dim);
  outer_strides.erase(outer_strides.begin() + dim);
  return t.as_strided(outer_sizes, outer_strides, t.storage_offset());
}

// Out of line, so that the check in the per-element loops stays a compare
// and a never-taken branch.
[[noreturn, gnu::cold, gnu::noinline]] static void index_out_of_range(const char* op, int64_t v, int64_t dim,
                                                                       int64_t limit) {
  KILN_FAIL(op, ": index ", v, " is out of range for dim ", dim, " of size ", limit);
}

// Reads index value i of a run and rejects it unless it lies in [0, limit).
static inline int64_t checked_index(const char* op, const char* idx, int64_t idx_step, int64_t i, int64_t dim,
                                    int64_t limit) {
  int64_t v = *reinterpret_cast<const int64_t*>(idx + i * idx_step);
  // One unsigned compare covers v < 0 too.
  if (static_cast<uint64_t>(v) >= static_cast<uint64_t>(limit)) [[unlikely]] index_out_of_range(op, v, dim, limit);
  return v;
}

// The shared walk. `shape` is the iteration shape (Y's and I's). For each
// outer run of n elements and each j it calls
//   run(x, y, idx, s, n)
// where element i of the run is X at x + i*s[0] (plus index * X's dim
// stride), Y at y + i*s[1] and I at idx + i*s[2]; s are byte strides.
template <class Run>
static void walk_along_dim(const Tensor& x, const Tensor& y, const Tensor& index, const Shape& shape, int64_t dim,
                           const Run& run) {
  Tensor xo = outer_view(x, shape, dim), yo = outer_view(y, shape, dim), io = outer_view(index, shape, dim);
  StridedLoop<3> loop({&xo, &yo, &io});
  int64_t count = shape[dim];
  int64_t y_step = y.stride(dim) * static_cast<int64_t>(y.element_size());
  int64_t i_step = index.stride(dim) * static_cast<int64_t>(sizeof(int64_t));
  // Walk j innermost when dim is laid out more tightly than the outer run
  // (gather along the last dim), else j outermost so that each j touches one
  // contiguous run (index_select of rows). Both visit j in ascending order.
  bool j_inner = std::abs(y_step) < std::abs(loop.inner_strides()[1]);
  int64_t grain = std::max<int64_t>(1, kIndexGrain / std::max<int64_t>(count, 1));
  loop.run(grain, [&](char** p, const int64_t* s, int64_t n) {
    if (j_inner) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < count; ++j) {
          run(p[0] + i * s[0], p[1] + i * s[1] + j * y_step, p[2] + i * s[2] + j * i_step, s, 1);
        }
      }
    } else {
      for (int64_t j = 0; j < count; ++j) run(p[0], p[1] + j * y_step, p[2] + j * i_step, s, n);
    }
  });
}

// Copies are dtype-blind: dispatch on the element size only.
template <class Fn>
static void visit_element_size(size_t size, Fn&& fn) {
  switch (size) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    case 8: return fn.template operator()<uint64_t>();
    default: KILN_FAIL("index: unsupported element size ", size);
  }
}

// y[i] = x[i at index[i]] for the gather-like ops.
static void gather_like(const char* op, const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  int64_t limit = in.size(dim);
  int64_t x_step = in.stride(dim) * static_cast<int64_t>(in.element_size());
  visit_element_size(out.element_size(), [&]<class T>() {
    walk_along_dim(in, out, index, out.shape(), dim,
                   [&](const char* x, char* y, const char* idx, const int64_t* s, int64_t n) {
                     if (s[2] == 0) {  // one index for the whole run (index_select)
                       const char* src = x + checked_index(op, idx, 0, 0, dim, limit) * x_step;
                       if (s[0] == static_cast<int64_t>(sizeof(T)) && s[1] == static_cast<int64_t>(sizeof(T))) {
                         std::memcpy(y, src, n * sizeof(T));
                         return;
                       }
                       for (int64_t i = 0; i < n; ++i) {
                         *reinterpret_cast<T*>(y + i * s[1]) = *reinterpret_cast<const T*>(src + i * s[0]);
                       }
                       return;
                     }
                     for (int64_t i = 0; i < n; ++i) {
                       int64_t v = checked_index(op, idx, s[2], i, dim, limit);
                       *reinterpret_cast<T*>(y + i * s[1]) = *reinterpret_cast<const T*>(x + i * s[0] + v * x_step);
                     }
                   });
  });
}

void CpuBackend::index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  // index: (K,) seen as out's shape with stride 0 outside dim.
  Shape strides(out.dim(), 0);
  strides[dim] = index.stride(0);
  Tensor spread = index.as_strided(out.shape(), strides, index.storage_offset());
  gather_like("index_select", out, in, dim, spread);
}

void CpuBackend::gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  gather_like("gather", out, in, dim, index);
}

void CpuBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  int64_t limit = out.size(dim);
  int64_t x_step = out.stride(dim) * static_cast<int64_t>(out.element_size());
  visit_dtype(out.dtype(), [&]<class T>() {
    using Acc = ComputeType<T>;
    walk_along_dim(out, src, index, index.shape(), dim,
                   [&](char* x, const char* y, const char* idx, const int64_t* s, int64_t n) {
                     for (int64_t i = 0; i < n; ++i) {
                       int64_t v = checked_index("scatter_add", idx, s[2], i, dim, limit);
                       T* dst = reinterpret_cast<T*>(x + i * s[0] + v * x_step);
                       Acc add = static_cast<Acc>(*reinterpret_cast<const T*>(y + i * s[1]));
                       *dst = static_cast<T>(static_cast<Acc>(*dst) + add);
                     }
                   });
  });
}

void CpuBackend::check_index_range(const Tensor& index, int64_t limit, const IndexErrorMessage& message) {
  const Tensor values = index.contiguous();
  const int64_t* v = values.data<int64_t>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    // One unsigned compare covers v < 0 too.
    if (static_cast<uint64_t>(v[i]) >= static_cast<uint64_t>(limit)) [[unlikely]] KILN_FAIL(message(v[i]));
  }
}

}  // namespace kiln::cpu
