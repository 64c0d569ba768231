// CPU reductions: sum, prod, max and min over any set of dims.
//
// Note [Blocked summation]
// Adding 16M float32 values one after another into one float32 accumulator
// goes wrong once the running sum is ~2^24 times larger than the elements:
// each addition then rounds most (finally all) of its element away, so the
// error grows with n. We instead sum blocks of kSumBlock elements in float32 with many
// independent accumulators (the SIMD lanes), combine those as a tree, and add
// each block's total to a float64 running total. The float32 error is then
// that of a sum of ~128 numbers, the float64 one negligible, and the hot loop
// stays float32 at full SIMD width and memory speed.
//
// Each output's reduction is cut into fixed "units" (whole blocks, or groups
// of short rows); a unit's total is computed from the identity and the unit
// totals are merged in order. Threads only decide who computes which unit, so
// the result is bit-identical for any thread count.
//
// Two layouts, chosen from the coalesced dims (tensor/cpu/reduce_plan.h):
// - horizontal: the general case; each output walks its reduced elements,
//   innermost reduced dim as a strided (usually contiguous) run. Full and
//   last-dim reductions of contiguous tensors are one contiguous run each.
// - vertical: the innermost kept dim is contiguous in input and output and
//   the reduced dims are outside it (sum over dim 0 of (N, M)). Rows are
//   added into M partial results at once instead of striding down columns.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/reduce_fold.h"
#include "tensor/cpu/reduce_plan.h"
#include "tensor/cpu/reduce_simd.h"

namespace kiln::cpu {

float sum_f32_scalar(const float* x, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += x[i + k];
  }
  for (int k = 0; i < n; ++i, ++k) acc[k] += x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

float max_f32_scalar(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    m = x[i] > m ? x[i] : m;
  }
  return m;
}

float min_f32_scalar(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    m = x[i] < m ? x[i] : m;
  }
  return m;
}

namespace {

// Below this many elements a reduction stays on the calling thread.
constexpr int64_t kGrain = 32768;
// Vertical layout: columns handled together (rows of up to 16 KiB of float32
// are read as one stream; their float32 partials stay in L1), rows folded in
// the accumulation type before joining the totals, and rows per unit of
// parallel work.
constexpr int64_t kColumnChunk = 4096;
constexpr int64_t kRowBlock = 64;
constexpr int64_t kPanelRows = 1024;

using FloatBlockFn = float (*)(const float*, int64_t);

FloatBlockFn pick_float_block(ReduceOp op) {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return op == ReduceOp::Sum ? sum_f32_avx512 : op == ReduceOp::Max ? max_f32_avx512 : min_f32_avx512;
    case SimdLevel::Avx2:
      return op == ReduceOp::Sum ? sum_f32_avx2 : op == ReduceOp::Max ? max_f32_avx2 : min_f32_avx2;
    case SimdLevel::Scalar: break;
  }
  return op == ReduceOp::Sum ? sum_f32_scalar : op == ReduceOp::Max ? max_f32_scalar : min_f32_scalar;
}

// Folds n elements p[0], p[stride], ... (n <= kSumBlock) into the block
// accumulator type.
template <ReduceOp Op, class T>
typename Fold<Op, T>::Acc fold_block(const T* p, int64_t n, int64_t stride) {
  using F = Fold<Op, T>;
  using Acc = typename F::Acc;
  using Value = typename F::Value;
  if constexpr (std::is_same_v<T, float> && Op != ReduceOp::Prod) {
    // Short runs (last-dim sums of (N, 16)) are cheaper inline than through
    // the dispatched call.
    static const FloatBlockFn fast = pick_float_block(Op);
    if (stride == 1 && n >= 64) return fast(p, n);
  }
  if (stride == 1) {
    // Eight independent accumulators: no loop-carried dependency chain, and
    // the compiler can keep them in vector registers.
    Acc acc[8];
    for (Acc& a : acc) a = F::template identity<Acc>();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int k = 0; k < 8; ++k) acc[k] = F::step(acc[k], static_cast<Value>(p[i + k]));
    }
    for (; i < n; ++i) acc[0] = F::step(acc[0], static_cast<Value>(p[i]));
    return F::merge(F::merge(F::merge(acc[0], acc[1]), F::merge(acc[2], acc[3])),
                    F::merge(F::merge(acc[4], acc[5]), F::merge(acc[6], acc[7])));
  }
  Acc acc = F::template identity<Acc>();
  for (int64_t i = 0; i < n; ++i) acc = F::step(acc, static_cast<Value>(p[i * stride]));
  return acc;
}

// ---- horizontal layout ----

// One output's reduction: `rows` (the outer reduced dims) times a run of
// run_len elements at run_stride, cut into units of about kSumBlock elements.
struct HorizontalPlan {
  DimSet<2> kept;  // strides: {in, out}
  DimSet<1> rows;  // outer reduced dims
  int64_t run_len = 1;
  int64_t run_stride = 0;
  int64_t blocks_per_row = 1;  // when a run is longer than a block
  int64_t rows_per_unit = 1;   // when runs are shorter than a block
  int64_t units = 1;

  void cut_units() {
    int64_t n_rows = rows.numel();
    if (run_len >= kSumBlock) {
      blocks_per_row = (run_len + kSumBlock - 1) / kSumBlock;
      units = n_rows * blocks_per_row;
    } else {
      rows_per_unit = std::max<int64_t>(1, kSumBlock / std::max<int64_t>(run_len, 1));
      units = (n_rows + rows_per_unit - 1) / rows_per_unit;
    }
  }
  int64_t unit_elements() const { return std::min(run_len, kSumBlock) * (run_len >= kSumBlock ? 1 : rows_per_unit); }
};

template <ReduceOp Op, class T>
typename Fold<Op, T>::Total fold_unit(const T* base, const HorizontalPlan& h, int64_t u) {
  using F = Fold<Op, T>;
  using Total = typename F::Total;
  if (h.run_len >= kSumBlock) {
    int64_t row = u / h.blocks_per_row;
    int64_t start = (u % h.blocks_per_row) * kSumBlock;
    int64_t len = std::min(kSumBlock, h.run_len - start);
    DimWalker<1> walker(h.rows, row);
    return static_cast<Total>(fold_block<Op>(base + walker.offset() + start * h.run_stride, len, h.run_stride));
  }
  int64_t first = u * h.rows_per_unit;
  int64_t last = std::min(h.rows.numel(), first + h.rows_per_unit);
  Total total = F::template identity<Total>();
  DimWalker<1> walker(h.rows, first);
  for (int64_t r = first; r < last; ++r, walker.next()) {
    total = F::merge(total, static_cast<Total>(fold_block<Op>(base + walker.offset(), h.run_len, h.run_stride)));
  }
  return total;
}

template <ReduceOp Op, class T>
void reduce_horizontal(const HorizontalPlan& h, typename Fold<Op, T>::Out* out, const T* in) {
  using F = Fold<Op, T>;
  using Total = typename F::Total;
  int64_t n_out = h.kept.numel();
  int64_t n_red = h.rows.numel() * h.run_len;
  auto fold_output = [&](const T* base) {
    // One short run per output (last-dim sums of small rows): one block.
    if (h.units == 1 && h.rows.ndim() == 0) return static_cast<Total>(fold_block<Op>(base, h.run_len, h.run_stride));
    Total total = F::template identity<Total>();
    for (int64_t u = 0; u < h.units; ++u) total = F::merge(total, fold_unit<Op>(base, h, u));
    return total;
  };
  bool split_outputs = n_out >= get_num_threads() || h.units == 1 || n_out * n_red < 2 * kGrain;
  if (split_outputs) {
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(n_red, 1));
    parallel_for(0, n_out, grain, [&](int64_t begin, int64_t end) {
      DimWalker<2> walker(h.kept, begin);
      for (int64_t o = begin; o < end; ++o, walker.next()) {
        out[walker.offset(1)] = F::to_out(fold_output(in + walker.offset(0)));
      }
    });
    return;
  }
  // Few outputs, each a long reduction: threads share each output's units.
  // unique_ptr, not vector: vector<bool> (max of a bool tensor) packs bits,
  // which threads cannot write independently.
  auto partial = std::make_unique<Total[]>(h.units);
  int64_t grain = std::max<int64_t>(1, kGrain / h.unit_elements());
  DimWalker<2> walker(h.kept, 0);
  for (int64_t o = 0; o < n_out; ++o, walker.next()) {
    const T* base = in + walker.offset(0);
    parallel_for(0, h.units, grain, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) partial[u] = fold_unit<Op>(base, h, u);
    });
    Total total = F::template identity<Total>();
    for (int64_t u = 0; u < h.units; ++u) total = F::merge(total, partial[u]);
    out[walker.offset(1)] = F::to_out(total);
  }
}

// ---- vertical layout ----

struct VerticalPlan {
  DimSet<2> outer;    // kept dims outside the contiguous one; strides {in, out}
  DimSet<1> reduced;  // all reduced dims: the "rows"
  int64_t columns = 1;  // the contiguous kept dim (stride 1 in input and output)
};

// totals[0..cols) = fold over rows [first, last) of row[0..cols), folding
// kRowBlock rows at a time into acc (the accumulation type) first.
template <ReduceOp Op, class T>
void fold_panel(const T* base, const VerticalPlan& v, int64_t first, int64_t last, int64_t cols,
                typename Fold<Op, T>::Acc* acc, typename Fold<Op, T>::Total* totals) {
  using F = Fold<Op, T>;
  using Acc = typename F::Acc;
  using Value = typename F::Value;
  for (int64_t j = 0; j < cols; ++j) totals[j] = F::template identity<typename F::Total>();
  DimWalker<1> walker(v.reduced, first);
  for (int64_t r0 = first; r0 < last; r0 += kRowBlock) {
    for (int64_t j = 0; j < cols; ++j) acc[j] = F::template identity<Acc>();
    int64_t r = r0, end = std::min(last, r0 + kRowBlock);
    // Four rows per sweep: acc is loaded and stored once per four rows, and
    // the fold order is still row after row.
    for (; r + 4 <= end; r += 4) {
      const T* row0 = base + walker.offset();
      walker.next();
      const T* row1 = base + walker.offset();
      walker.next();
      const T* row2 = base + walker.offset();
      walker.next();
      const T* row3 = base + walker.offset();
      walker.next();
      for (int64_t j = 0; j < cols; ++j) {
        Acc a = F::step(acc[j], static_cast<Value>(row0[j]));
        a = F::step(a, static_cast<Value>(row1[j]));
        a = F::step(a, static_cast<Value>(row2[j]));
        acc[j] = F::step(a, static_cast<Value>(row3[j]));
      }
    }
    for (; r < end; ++r, walker.next()) {
      const T* row = base + walker.offset();
      for (int64_t j = 0; j < cols; ++j) acc[j] = F::step(acc[j], static_cast<Value>(row[j]));
    }
    for (int64_t j = 0; j < cols; ++j) totals[j] = F::merge(totals[j], static_cast<typename F::Total>(acc[j]));
  }
}

template <ReduceOp Op, class T>
void reduce_vertical(const VerticalPlan& v, typename Fold<Op, T>::Out* out, const T* in) {
  using F = Fold<Op, T>;
  using Acc = typename F::Acc;
  using Total = typename F::Total;
  int64_t n_rows = v.reduced.numel();
  int64_t chunk = std::min(kColumnChunk, v.columns);
  int64_t chunks = (v.columns + chunk - 1) / chunk;
  int64_t units = v.outer.numel() * chunks;  // (outer index, column chunk)
  int64_t panels = (n_rows + kPanelRows - 1) / kPanelRows;

  // Unit u's column count and its input/output bases.
  auto locate = [&](int64_t u, const T*& base, typename F::Out*& dst) {
    DimWalker<2> walker(v.outer, u / chunks);
    int64_t j0 = (u % chunks) * chunk;
    base = in + walker.offset(0) + j0;
    dst = out + walker.offset(1) + j0;
    return std::min(chunk, v.columns - j0);
  };
  auto merge_into = [](Total* totals, const Total* panel, int64_t cols) {
    for (int64_t j = 0; j < cols; ++j) totals[j] = F::merge(totals[j], panel[j]);
  };
  // Scratch is on the heap (a chunk of doubles is 32 KiB) and arrays, not
  // vectors, because vector<bool> packs bits.
  if (units >= get_num_threads() || panels == 1) {
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(n_rows * chunk, 1));
    parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
      auto acc = std::make_unique<Acc[]>(chunk);
      auto totals = std::make_unique<Total[]>(chunk);
      auto panel = std::make_unique<Total[]>(chunk);
      for (int64_t u = begin; u < end; ++u) {
        const T* base;
        typename F::Out* dst;
        int64_t cols = locate(u, base, dst);
        for (int64_t j = 0; j < cols; ++j) totals[j] = F::template identity<Total>();
        for (int64_t p = 0; p < panels; ++p) {
          fold_panel<Op>(base, v, p * kPanelRows, std::min(n_rows, (p + 1) * kPanelRows), cols, acc.get(),
                         panel.get());
          merge_into(totals.get(), panel.get(), cols);
        }
        for (int64_t j = 0; j < cols; ++j) dst[j] = F::to_out(totals[j]);
      }
    });
    return;
  }
  // Few (outer, chunk) units with many rows: threads share each unit's panels.
  auto partial = std::make_unique<Total[]>(panels * chunk);  // (panels, chunk)
  int64_t grain = std::max<int64_t>(1, kGrain / (kPanelRows * chunk));
  for (int64_t u = 0; u < units; ++u) {
    const T* base;
    typename F::Out* dst;
    int64_t cols = locate(u, base, dst);
    parallel_for(0, panels, grain, [&](int64_t begin, int64_t end) {
      auto acc = std::make_unique<Acc[]>(chunk);
      for (int64_t p = begin; p < end; ++p) {
        fold_panel<Op>(base, v, p * kPanelRows, std::min(n_rows, (p + 1) * kPanelRows), cols, acc.get(),
                       partial.get() + p * chunk);
      }
    });
    auto totals = std::make_unique<Total[]>(chunk);
    for (int64_t j = 0; j < cols; ++j) totals[j] = F::template identity<Total>();
    for (int64_t p = 0; p < panels; ++p) merge_into(totals.get(), partial.get() + p * chunk, cols);
    for (int64_t j = 0; j < cols; ++j) dst[j] = F::to_out(totals[j]);
  }
}

// Smallest contiguous kept dim worth the vertical layout.
constexpr int64_t kMinVerticalColumns = 16;

template <ReduceOp Op, class T>
void reduce_typed(const Tensor& out, const Tensor& in, const Shape& dims) {
  using F = Fold<Op, T>;
  using Out = typename F::Out;
  KILN_CHECK(out.dtype() == dtype_of<Out>(), "reduce: expected a ", dtype_of<Out>(), " output for a ",
             in.dtype(), " input, got ", out.dtype());
  Out* dst = static_cast<Out*>(out.data_ptr());
  const T* src = static_cast<const T*>(in.data_ptr());
  if (out.numel() == 0) return;

  DimSet<2> kept;
  std::vector<std::pair<int64_t, int64_t>> reduced;  // (size, stride)
  for (int64_t d = 0; d < in.dim(); ++d) {
    bool is_reduced = std::binary_search(dims.begin(), dims.end(), d);
    if (is_reduced) {
      if (in.size(d) != 1) reduced.emplace_back(in.size(d), in.stride(d));
    } else {
      kept.add(in.size(d), {in.stride(d), out.stride(d)});
    }
  }
  kept.coalesce();
  // Reduced dims in order of decreasing stride, so that the innermost run is
  // the one closest to contiguous whatever the view's dim order.
  std::stable_sort(reduced.begin(), reduced.end(),
                   [](auto a, auto b) { return std::abs(a.second) > std::abs(b.second); });
  DimSet<1> rows;
  for (auto [size, stride] : reduced) rows.add(size, {stride});
  rows.coalesce();

  if (rows.numel() == 0) {
    // Nothing to fold: the identity (the front-end rejects this for max/min).
    KILN_CHECK(Op == ReduceOp::Sum || Op == ReduceOp::Prod, "reduce: max/min over an empty dim");
    DimWalker<2> walker(kept, 0);
    for (int64_t o = 0; o < kept.numel(); ++o, walker.next()) {
      dst[walker.offset(1)] = F::to_out(F::template identity<typename F::Total>());
    }
    return;
  }

  bool vertical = kept.ndim() > 0 && kept.strides.back()[0] == 1 && kept.strides.back()[1] == 1 &&
                  kept.sizes.back() >= kMinVerticalColumns && rows.ndim() > 0 && rows.strides.back()[0] != 1;
  if (vertical) {
    VerticalPlan v;
    v.outer = kept;
    v.columns = v.outer.pop_inner().first;
    v.reduced = rows;
    reduce_vertical<Op>(v, dst, src);
    return;
  }
  HorizontalPlan h;
  h.kept = kept;
  h.rows = rows;
  auto [run_len, run_strides] = h.rows.pop_inner();
  h.run_len = run_len;
  h.run_stride = run_strides[0];
  h.cut_units();
  reduce_horizontal<Op>(h, dst, src);
}

template <ReduceOp Op>
void reduce_op(const Tensor& out, const Tensor& in, const Shape& dims) {
  visit_dtype(in.dtype(), [&]<class T>() { reduce_typed<Op, T>(out, in, dims); });
}

}  // namespace

float max_f32(const float* x, int64_t n) {
  static const FloatBlockFn fn = pick_float_block(ReduceOp::Max);
  return fn(x, n);
}

float min_f32(const float* x, int64_t n) {
  static const FloatBlockFn fn = pick_float_block(ReduceOp::Min);
  return fn(x, n);
}

void CpuBackend::reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) {
  switch (op) {
    case ReduceOp::Sum: return reduce_op<ReduceOp::Sum>(out, in, dims);
    case ReduceOp::Prod: return reduce_op<ReduceOp::Prod>(out, in, dims);
    case ReduceOp::Max: return reduce_op<ReduceOp::Max>(out, in, dims);
    case ReduceOp::Min: return reduce_op<ReduceOp::Min>(out, in, dims);
  }
  KILN_FAIL("reduce: invalid op code ", static_cast<int>(op));
}

}  // namespace kiln::cpu
