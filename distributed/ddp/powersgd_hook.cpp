// PowerSGD gradient compression (Vogels, Karimireddy and Jaggi, "PowerSGD:
// Practical Low-Rank Gradient Compression for Distributed Optimization",
// NeurIPS 2019), as PyTorch's powerSGD_hook; the overview is in Note [DDP
// communication hooks] (comm_hook.h).
//
// Note [PowerSGD step]
// One bucket, one step, W ranks; M_w is rank w's (n, m) view of a gradient,
// r = min(n, m, matrix_approximation_rank).
//   start()
//   1. Sort the gradients: a matrix is compressed when worth_compressing();
//      1-d gradients (biases), empty ones and small matrices are copied into
//      one flat buffer whose all_reduce (Avg) starts at once.
//   2. M = M_w + E_w, rank w's error from the last step (error feedback).
//   3. Q (m, r): on the first compressed step, or on every step without
//      warm start, N(0, 1) from the bucket's generator, which is seeded with
//      options.seed + bucket.index and advanced identically on every rank,
//      so every rank draws the same Q. Otherwise last step's averaged Q,
//      which is one more power iteration towards the top-r subspace of the
//      (slowly changing) average gradient. Q is orthonormalized either way.
//   4. P = M Q, every matrix's P in one flat buffer, all_reduce (Sum).
//   wait()
//   5. P = sum_w M_w Q. Orthonormalize it: its scale does not matter, so
//      P needed no division by W.
//   6. Q = M^T P, all_reduce (Sum) and divide by W: Q = M_avg^T P.
//   7. M_approx = P Q^T = P P^T M_avg, the projection of the average onto
//      the columns of P; it is the same on every rank.
//   8. E_w = M - M_approx: what this rank sent too little of is sent later.
//      Averaged over ranks, E is exactly the compression error of the
//      average, so the sum of the applied updates over k steps is k times
//      the average gradient minus one step's error.
// Steps 5-8 need the sums of steps 4 and 6, so wait() does them.
//
// Two cases are exact (tests/distributed/comm_hook_test.cpp checks both):
// r = min(n, m), where P P^T projects onto a space holding all of M_avg's
// columns; and M_w = s_w u v^T on every rank (one shared direction), where
// P is u's direction and P P^T M_avg = M_avg.
//
// Where this differs from PyTorch: PyTorch keeps an error for the whole
// bucket, uncompressed gradients included; theirs is M_w - M_avg, which
// sums to zero over the ranks and so changes no average but adds rounding.
// We keep errors only for compressed matrices. PyTorch orthogonalizes with
// QR from rank 3 on; we always use Gram-Schmidt (Note [Orthogonalizing P
// and Q]). The math is float32 (float64 for a float64 bucket), whatever the
// gradients' dtype.
//
// Note [Orthogonalizing P and Q]
// Classical Gram-Schmidt with each column projected twice ("twice is
// enough", Parlett): where a column of P is (nearly) a combination of the
// previous ones, as when r exceeds the rank of M_avg, one projection leaves
// a residual of rounding noise that is far from orthogonal; normalised, it
// would add a spurious direction of M's size to P P^T M. The second
// projection makes it orthogonal to working precision. Each column is then
// divided by max(norm, kZeroColumnNorm) rather than PyTorch's norm + eps,
// so a column of normal size is normalised exactly (full-rank compression
// stays exact) while a zero column, which vanishing gradients produce,
// stays zero instead of becoming NaN.
#include "distributed/ddp/powersgd_hook.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "distributed/ddp/comm_hook.h"
#include "tensor/elementwise.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/linalg.h"
#include "tensor/random.h"
#include "tensor/reduce.h"

namespace kiln::distributed {

namespace powersgd {

void orthogonalize_columns(Tensor& matrix) {
  KILN_CHECK(matrix.dim() == 2 && matrix.size(1) <= matrix.size(0),
             "powersgd: orthogonalize_columns needs an (n, r) matrix with r <= n, got ", matrix.shape());
  const int64_t r = matrix.size(1);
  for (int64_t i = 0; i < r; ++i) {
    Tensor column = matrix.narrow(1, i, 1);  // (n, 1)
    if (i > 0) {
      const Tensor done = matrix.narrow(1, 0, i);  // (n, i), orthonormal columns
      for (int pass = 0; pass < 2; ++pass) ops::sub_(column, ops::mm(done, ops::mm(done.t(), column)));
    }
    const Tensor norm = ops::sqrt(ops::sum(ops::mul(column, column)));  // 0-dim
    ops::div_(column, ops::clamp(norm, kZeroColumnNorm, std::nullopt));
  }
}

bool worth_compressing(int64_t n, int64_t m, int64_t rank, double min_compression_rate) {
  const double uncompressed = static_cast<double>(n) * static_cast<double>(m);
  const double compressed = static_cast<double>(n + m) * static_cast<double>(rank);
  return uncompressed >= min_compression_rate * compressed;
}

}  // namespace powersgd

namespace {

// What PowerSGD keeps about one bucket from one step to the next.
struct BucketState {
  explicit BucketState(uint64_t seed) : generator(seed) {}

  Generator generator;                 // draws the first Q; the same stream on every rank
  std::vector<Shape> gradient_shapes;  // the layout `errors` and `q_memory` belong to
  std::vector<Tensor> errors;          // per compressed matrix k: (n_k, m_k), E_w of step 8
  Tensor q_memory;                     // (sum_k m_k r_k): the averaged Qs; undefined before
};

// One compressed gradient during one step.
struct CompressedMatrix {
  Tensor gradient;  // (n, m) view of the gradient in the bucket
  Tensor input;     // (n, m) in the compute dtype: gradient + error
  Tensor p;         // (n, r) view into the step's P memory
  Tensor q;         // (m, r) view into the bucket's Q memory
};

// Steps 5-8 of Note [PowerSGD step], and putting the uncompressed
// gradients back.
class PowerSGDReduction : public PendingReduction {
 public:
  PowerSGDReduction(ProcessGroup& group, BucketState& state, bool use_error_feedback)
      : group_(group), state_(state), use_error_feedback_(use_error_feedback) {}

  void wait() override {
    if (uncompressed_work) {
      uncompressed_work->wait();
      int64_t offset = 0;
      for (Tensor& gradient : uncompressed) {
        gradient.copy_(uncompressed_memory.narrow(0, offset, gradient.numel()).view(gradient.shape()));
        offset += gradient.numel();
      }
    }
    if (!p_work) return;
    p_work->wait();
    for (CompressedMatrix& matrix : matrices) {
      powersgd::orthogonalize_columns(matrix.p);
      matrix.q.copy_(ops::mm(matrix.input.t(), matrix.p));
    }
    group_.all_reduce(state_.q_memory, ReduceOp::Sum)->wait();
    ops::div_(state_.q_memory, group_.size());
    for (size_t k = 0; k < matrices.size(); ++k) {
      CompressedMatrix& matrix = matrices[k];
      const Tensor approx = ops::mm(matrix.p, matrix.q.t());  // (n, m)
      if (use_error_feedback_) state_.errors[k] = ops::sub(matrix.input, approx);
      matrix.gradient.copy_(approx);
    }
  }

  // Filled in by PowerSGDHook::start().
  std::vector<Tensor> uncompressed;  // views into the bucket, in bucket order
  Tensor uncompressed_memory;        // (sum of their numel), the bucket's dtype
  WorkPtr uncompressed_work;         // null when nothing goes uncompressed
  std::vector<CompressedMatrix> matrices;
  Tensor p_memory;  // (sum_k n_k r_k)
  WorkPtr p_work;   // null when nothing is compressed

 private:
  ProcessGroup& group_;
  BucketState& state_;
  bool use_error_feedback_;
};

class PowerSGDHook : public CommHook {
 public:
  explicit PowerSGDHook(PowerSGDOptions options) : options_(options), exact_(allreduce_hook()) {}

  std::string name() const override {
    std::ostringstream os;
    os << "powersgd(rank=" << options_.matrix_approximation_rank << ")";
    return os.str();
  }

  std::unique_ptr<PendingReduction> start(ProcessGroup& group, GradBucket& bucket) override {
    if (bucket.iteration < options_.start_iteration) return exact_->start(group, bucket);
    const Tensor& buffer = bucket.buffer;
    KILN_CHECK(buffer.is_floating_point(), "powersgd hook: bucket ", bucket.index, " holds ", buffer.dtype(),
               " gradients; PowerSGD compresses floating-point gradients only");
    const DType compute = buffer.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
    const TensorOptions compute_options(compute, buffer.device());
    BucketState& state = state_for(bucket);
    auto reduction = std::make_unique<PowerSGDReduction>(group, state, options_.use_error_feedback);

    // Step 1: sort the gradients, and send the uncompressed ones right away.
    std::vector<Tensor> to_compress;  // (n, m) views
    int64_t uncompressed_numel = 0;
    for (const Tensor& gradient : bucket.gradients) {
      if (gradient.dim() >= 2 && gradient.numel() > 0) {
        const int64_t n = gradient.size(0), m = gradient.numel() / n;
        if (powersgd::worth_compressing(n, m, rank_for(n, m), options_.min_compression_rate)) {
          to_compress.push_back(gradient.view({n, m}));
          continue;
        }
      }
      reduction->uncompressed.push_back(gradient);
      uncompressed_numel += gradient.numel();
    }
    if (uncompressed_numel > 0) {
      Tensor memory = empty({uncompressed_numel}, TensorOptions(buffer.dtype(), buffer.device()));
      int64_t offset = 0;
      for (const Tensor& gradient : reduction->uncompressed) {
        memory.narrow(0, offset, gradient.numel()).view(gradient.shape()).copy_(gradient);
        offset += gradient.numel();
      }
      reduction->uncompressed_work = group.all_reduce(memory, ReduceOp::Avg);
      reduction->uncompressed_memory = memory;
    }
    if (to_compress.empty()) return reduction;

    // Step 2: M = gradient + error.
    if (options_.use_error_feedback && state.errors.empty()) {
      for (const Tensor& gradient : to_compress) state.errors.push_back(zeros(gradient.shape(), compute_options));
    }
    int64_t p_numel = 0, q_numel = 0;
    for (size_t k = 0; k < to_compress.size(); ++k) {
      CompressedMatrix matrix;
      matrix.gradient = to_compress[k];
      matrix.input = matrix.gradient.to(compute);
      if (options_.use_error_feedback) matrix.input = ops::add(matrix.input, state.errors[k]);
      const int64_t r = rank_for(matrix.gradient.size(0), matrix.gradient.size(1));
      p_numel += matrix.gradient.size(0) * r;
      q_numel += matrix.gradient.size(1) * r;
      reduction->matrices.push_back(std::move(matrix));
    }

    // Step 3: Q, fresh or warm.
    const bool fresh_q = !options_.warm_start || !state.q_memory.defined();
    if (fresh_q) state.q_memory = empty({q_numel}, compute_options);
    reduction->p_memory = empty({p_numel}, compute_options);
    int64_t p_offset = 0, q_offset = 0;
    for (CompressedMatrix& matrix : reduction->matrices) {
      const int64_t n = matrix.gradient.size(0), m = matrix.gradient.size(1), r = rank_for(n, m);
      matrix.p = reduction->p_memory.narrow(0, p_offset, n * r).view({n, r});
      matrix.q = state.q_memory.narrow(0, q_offset, m * r).view({m, r});
      p_offset += n * r;
      q_offset += m * r;
      // Drawn on the CPU, so that the numbers do not depend on the device.
      if (fresh_q) matrix.q.copy_(randn({m, r}, compute, &state.generator));
      powersgd::orthogonalize_columns(matrix.q);
      // Step 4: P = M Q.
      matrix.p.copy_(ops::mm(matrix.input, matrix.q));
    }
    reduction->p_work = group.all_reduce(reduction->p_memory, ReduceOp::Sum);
    return reduction;
  }

 private:
  int64_t rank_for(int64_t n, int64_t m) const { return std::min({n, m, options_.matrix_approximation_rank}); }

  // The bucket's state, created on its first compressed step. A bucket
  // whose gradients change shape between steps cannot reuse its errors and
  // Qs, and every rank would have to agree on dropping them: an error.
  BucketState& state_for(const GradBucket& bucket) {
    std::vector<Shape> shapes;
    for (const Tensor& gradient : bucket.gradients) shapes.push_back(gradient.shape());
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, created] = states_.try_emplace(bucket.index, options_.seed + bucket.index);
    BucketState& state = it->second;
    if (created) state.gradient_shapes = shapes;
    KILN_CHECK(state.gradient_shapes == shapes, "powersgd hook: bucket ", bucket.index,
               " held gradients of shapes ", state.gradient_shapes, " and now holds ", shapes,
               "; its error feedback and Q no longer fit (buckets must keep their layout once compression starts)");
    return state;
  }

  PowerSGDOptions options_;
  std::shared_ptr<CommHook> exact_;  // allreduce_hook(), before start_iteration
  // start() runs on backward's threads; std::map keeps each state where it
  // is while other buckets are added, so a pending reduction may hold it.
  std::mutex mutex_;
  std::map<size_t, BucketState> states_;
};

}  // namespace

std::shared_ptr<CommHook> powersgd_hook(PowerSGDOptions options) {
  KILN_CHECK(options.matrix_approximation_rank >= 1, "powersgd_hook: matrix_approximation_rank must be at least 1, got ",
             options.matrix_approximation_rank);
  KILN_CHECK(options.start_iteration >= 0, "powersgd_hook: start_iteration must be at least 0, got ",
             options.start_iteration);
  KILN_CHECK(options.min_compression_rate >= 0, "powersgd_hook: min_compression_rate must be at least 0, got ",
             options.min_compression_rate);
  return std::make_shared<PowerSGDHook>(options);
}

}  // namespace kiln::distributed
