// CPU topk and multinomial over rows (rows, n), contiguous; threads split
// the rows, and every row's result depends on that row alone, so nothing
// depends on the thread count.
//
// topk: a partial selection per row (std::nth_element, then a sort of the k
// chosen), O(n + k log k), under a strict total order: better value first,
// NaN above every number, and the lower index among equals.
// multinomial: Note [Multinomial draws] in tensor/multinomial_draw.h, the
// arithmetic the CUDA kernel shares.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"
#include "tensor/error.h"
#include "tensor/multinomial_draw.h"

namespace kiln::cpu {
namespace {

// Below about this many elements a kernel stays on the calling thread.
constexpr int64_t kGrain = 32768;

// ---- topk ----

template <class C>
struct Entry {
  C value;  // in the compute type
  int64_t index;
};

// The order topk lists entries in: true when a comes before b.
template <class C>
struct Before {
  bool largest;
  bool operator()(const Entry<C>& a, const Entry<C>& b) const {
    if constexpr (std::is_floating_point_v<C>) {
      const bool a_nan = std::isnan(a.value), b_nan = std::isnan(b.value);
      if (a_nan || b_nan) {
        if (a_nan && b_nan) return a.index < b.index;
        return largest ? a_nan : b_nan;  // NaN is the largest
      }
    }
    if (a.value != b.value) return largest ? a.value > b.value : a.value < b.value;
    return a.index < b.index;
  }
};

template <class T>
void topk_typed(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest) {
  using C = ComputeType<T>;
  const int64_t rows = in.size(0), n = in.size(1);
  const T* src = in.data<T>();                     // in: (rows, n)
  T* out_values = values.data<T>();                // values: (rows, k)
  int64_t* out_indices = indices.data<int64_t>();  // indices: (rows, k)
  const Before<C> before{largest};
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / n), [&](int64_t begin, int64_t end) {
    std::vector<Entry<C>> entries(n);
    for (int64_t r = begin; r < end; ++r) {
      const T* row = src + r * n;
      for (int64_t i = 0; i < n; ++i) entries[i] = {static_cast<C>(row[i]), i};
      if (k < n) std::nth_element(entries.begin(), entries.begin() + k, entries.end(), before);
      std::sort(entries.begin(), entries.begin() + k, before);
      for (int64_t j = 0; j < k; ++j) {
        // The input's own element, so that NaN payloads and -0 come through.
        out_values[r * k + j] = row[entries[j].index];
        out_indices[r * k + j] = entries[j].index;
      }
    }
  });
}

// ---- multinomial ----

// The problem of the lowest failing row, whichever thread finds it, so the
// error does not depend on the thread count.
class FirstProblem {
 public:
  void report(multinomial_draw::Encoded problem) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!found_ || problem.b < first_.b) first_ = problem;
    found_ = true;
  }
  void throw_if_any() const {
    if (found_) KILN_FAIL(multinomial_draw::error_message(first_.a, first_.b, first_.c));
  }

 private:
  std::mutex mutex_;
  bool found_ = false;
  multinomial_draw::Encoded first_{};
};

template <class T>
void multinomial_typed(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                       uint64_t offset) {
  using C = ComputeType<T>;
  using multinomial_draw::kSegments;
  const int64_t rows = probs.size(0), n = probs.size(1);
  const T* src = probs.data<T>();      // probs: (rows, n)
  int64_t* dst = out.data<int64_t>();  // out: (rows, num_samples)
  const int64_t len = multinomial_draw::segment_length(n);
  FirstProblem problem;
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / n), [&](int64_t begin, int64_t end) {
    std::vector<double> left(replacement ? 0 : n);  // without replacement: the weights not drawn yet
    double sums[kSegments], starts[kSegments + 1];
    for (int64_t r = begin; r < end; ++r) {
      const T* row = src + r * n;
      auto weight = [row](int64_t i) { return static_cast<double>(static_cast<C>(row[i])); };
      // Validate and sum each segment, as the CUDA block's threads do.
      int64_t positive = 0;
      bool bad = false;
      for (int s = 0; s < kSegments && !bad; ++s) {
        const int64_t b = std::min(n, s * len), e = std::min(n, b + len);
        for (int64_t i = b; i < e; ++i) {
          const double w = weight(i);
          if (!(w >= 0.0) || std::isinf(w)) {
            problem.report(multinomial_draw::encode_bad_entry(r, i, w));
            bad = true;
            break;
          }
          positive += w > 0.0;
        }
        sums[s] = multinomial_draw::segment_sum(weight, b, e);
      }
      if (bad) continue;
      multinomial_draw::segment_starts(sums, starts);
      const double total = starts[kSegments];
      if (!(total > 0.0) || std::isinf(total)) {
        problem.report(multinomial_draw::encode_bad_total(r, total));
        continue;
      }
      int64_t* samples = dst + r * num_samples;
      if (replacement) {
        for (int64_t j = 0; j < num_samples; ++j) {
          samples[j] =
              multinomial_draw::draw(weight, n, starts, multinomial_draw::uniform(seed, offset, r, num_samples, j));
        }
        continue;
      }
      if (positive < num_samples) {
        problem.report(multinomial_draw::encode_too_few_positive(r, positive, num_samples));
        continue;
      }
      for (int64_t i = 0; i < n; ++i) left[i] = weight(i);
      auto left_weight = [&left](int64_t i) { return left[i]; };
      for (int64_t j = 0; j < num_samples; ++j) {
        const int64_t i =
            multinomial_draw::draw(left_weight, n, starts, multinomial_draw::uniform(seed, offset, r, num_samples, j));
        samples[j] = i;
        left[i] = 0.0;
        const int s = static_cast<int>(i / len);
        sums[s] = multinomial_draw::segment_sum(left_weight, s * len, std::min(n, (s + 1) * len));
        multinomial_draw::segment_starts(sums, starts, s);
      }
    }
  });
  problem.throw_if_any();
}

}  // namespace

void CpuBackend::topk(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest) {
  if (values.numel() == 0) return;
  visit_dtype(in.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      KILN_FAIL("topk: expected a numeric tensor, got bool");
    } else {
      topk_typed<T>(values, indices, in, k, largest);
    }
  });
}

void CpuBackend::multinomial(const Tensor& out, const Tensor& probs, int64_t num_samples, bool replacement,
                             uint64_t seed, uint64_t offset) {
  if (out.numel() == 0) return;
  visit_floating_dtype(probs.dtype(), "multinomial",
                       [&]<class T>() { multinomial_typed<T>(out, probs, num_samples, replacement, seed, offset); });
}

}  // namespace kiln::cpu
