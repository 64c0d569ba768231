// CPU max/min along one dim with the index of the first extreme (argmax,
// argmin, max(x, dim)).
//
// Ties keep the first index and the first NaN wins, as torch. The layouts
// mirror tensor/cpu/reduce.cpp: when the reduced dim is outside a contiguous
// kept dim, rows are read whole and a best is tracked per column; a single
// long row (argmax of a flattened tensor) is scanned in fixed pieces by
// several threads, and the first piece holding the extreme wins, so the
// answer does not depend on the thread count.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/reduce_plan.h"
#include "tensor/cpu/reduce_simd.h"

namespace kiln::cpu {
namespace {

// Below this many elements a scan stays on the calling thread; also the
// piece length when threads share one row.
constexpr int64_t kGrain = 32768;
// Columns tracked together in the vertical layout, and the fewest worth it.
constexpr int64_t kColumnChunk = 2048;
constexpr int64_t kMinVerticalColumns = 16;

// ---- max/min with the index of the first extreme ----

// True when x should replace the current best: strictly greater (less) so
// that ties keep the first index, and a NaN replaces anything but a NaN so
// that the first NaN wins.
template <ReduceOp Op, class V>
bool beats(V x, V best) {
  bool wins = Op == ReduceOp::Max ? x > best : x < best;
  if constexpr (std::is_floating_point_v<V>) wins = wins || (x != x && best == best);
  return wins;
}

template <ReduceOp Op, class T>
struct Extreme {
  ComputeType<T> value;
  int64_t index;
};

// The first extreme of p[0], p[stride], ... p[(n-1)*stride], n >= 1, with
// indices counted from `first`.
template <ReduceOp Op, class T>
Extreme<Op, T> scan(const T* p, int64_t n, int64_t stride, int64_t first) {
  using V = ComputeType<T>;
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 1) {
      // Two fast passes beat one branchy one: the SIMD extreme, then the
      // first element equal to it (or the first NaN).
      float value = Op == ReduceOp::Max ? max_f32(p, n) : min_f32(p, n);
      int64_t i = 0;
      if (std::isnan(value)) {
        while (!std::isnan(p[i])) ++i;
      } else {
        while (p[i] != value) ++i;
      }
      return {value, first + i};
    }
  }
  Extreme<Op, T> best{static_cast<V>(p[0]), first};
  for (int64_t i = 1; i < n; ++i) {
    V x = static_cast<V>(p[i * stride]);
    if (beats<Op>(x, best.value)) best = {x, first + i};
  }
  return best;
}

template <ReduceOp Op, class T>
void reduce_with_index_typed(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  using V = ComputeType<T>;
  T* out_values = values.data<T>();
  int64_t* out_indices = indices.data<int64_t>();
  const T* src = static_cast<const T*>(in.data_ptr());
  if (values.numel() == 0) return;
  int64_t n = in.size(dim);
  int64_t stride = in.stride(dim);
  DimSet<3> kept;  // strides: {in, values, indices}
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d != dim) kept.add(in.size(d), {in.stride(d), values.stride(d), indices.stride(d)});
  }
  kept.coalesce();

  bool vertical = n > 1 && n <= INT32_MAX && kept.ndim() > 0 && kept.strides.back() == std::array<int64_t, 3>{1, 1, 1} &&
                  kept.sizes.back() >= kMinVerticalColumns;
  if (vertical) {
    // Rows of `columns` contiguous elements: track a best per column while
    // reading each row once, instead of striding down every column.
    DimSet<3> outer = kept;
    int64_t columns = outer.pop_inner().first;
    int64_t chunks = (columns + kColumnChunk - 1) / kColumnChunk;
    int64_t units = outer.numel() * chunks;
    int64_t grain = std::max<int64_t>(1, kGrain / (n * std::min(columns, kColumnChunk)));
    parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
      V best[kColumnChunk];
      // int32 row numbers: the same width as a float, so the selects below
      // vectorise together.
      int32_t where[kColumnChunk];
      for (int64_t u = begin; u < end; ++u) {
        DimWalker<3> walker(outer, u / chunks);
        int64_t j0 = (u % chunks) * kColumnChunk;
        int64_t cols = std::min(kColumnChunk, columns - j0);
        const T* base = src + walker.offset(0) + j0;
        for (int64_t j = 0; j < cols; ++j) {
          best[j] = static_cast<V>(base[j]);
          where[j] = 0;
        }
        for (int64_t r = 1; r < n; ++r) {
          const T* row = base + r * stride;
          int32_t r32 = static_cast<int32_t>(r);
          // Selects rather than branches, so the loop vectorises.
          for (int64_t j = 0; j < cols; ++j) {
            V x = static_cast<V>(row[j]);
            bool wins = beats<Op>(x, best[j]);
            best[j] = wins ? x : best[j];
            where[j] = wins ? r32 : where[j];
          }
        }
        for (int64_t j = 0; j < cols; ++j) {
          out_values[walker.offset(1) + j] = static_cast<T>(best[j]);
          out_indices[walker.offset(2) + j] = where[j];
        }
      }
    });
    return;
  }

  int64_t n_out = kept.numel();
  if (n_out >= get_num_threads() || n * n_out < 2 * kGrain) {
    parallel_for(0, n_out, std::max<int64_t>(1, kGrain / n), [&](int64_t begin, int64_t end) {
      DimWalker<3> walker(kept, begin);
      for (int64_t o = begin; o < end; ++o, walker.next()) {
        Extreme<Op, T> e = scan<Op>(src + walker.offset(0), n, stride, 0);
        out_values[walker.offset(1)] = static_cast<T>(e.value);
        out_indices[walker.offset(2)] = e.index;
      }
    });
    return;
  }
  // Few long rows (argmax of a flattened tensor): scan fixed pieces of each
  // row in parallel, then keep the first piece that holds the extreme.
  int64_t pieces = (n + kGrain - 1) / kGrain;
  std::vector<Extreme<Op, T>> found(pieces);
  DimWalker<3> walker(kept, 0);
  for (int64_t o = 0; o < n_out; ++o, walker.next()) {
    const T* row = src + walker.offset(0);
    parallel_for(0, pieces, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        int64_t first = p * kGrain;
        found[p] = scan<Op>(row + first * stride, std::min(kGrain, n - first), stride, first);
      }
    });
    Extreme<Op, T> best = found[0];
    for (int64_t p = 1; p < pieces; ++p) {
      if (beats<Op>(found[p].value, best.value)) best = found[p];
    }
    out_values[walker.offset(1)] = static_cast<T>(best.value);
    out_indices[walker.offset(2)] = best.index;
  }
}

}  // namespace

void CpuBackend::reduce_with_index(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in,
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

}  // namespace kiln::cpu
