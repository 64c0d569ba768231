// Communication hooks: how DistributedDataParallel averages one bucket of
// gradients over the ranks.
//
// Note [DDP communication hooks]
// The reducer (reducer.h) packs gradients into flat buckets and, as soon as
// a bucket's last gradient is ready during backward, hands it to the
// DDP instance's hook, which starts the communication and returns at once;
// before backward returns, the reducer waits for every bucket's reduction.
// A hook may replace the plain all_reduce with one that sends less:
//
// - allreduce_hook(): all_reduce with ReduceOp::Avg (the default; PyTorch's
//   allreduce_hook). Exact.
// - fp16_compress_hook(), bf16_compress_hook(): divide the bucket by the
//   world size, cast it to float16 or bfloat16, all_reduce the half-size
//   buffer (sum) and cast the average back: half the bytes, with the
//   rounding of one cast per rank and a sum in the narrow type (Note
//   [Dividing before the narrow sum] in compress_hooks.cpp gives the bound
//   tests/distributed/comm_hook_test.cpp checks).
// - powersgd_hook(options): PowerSGD (Vogels et al., 2019): each gradient
//   of two or more dimensions, viewed as an (n, m) matrix M, is
//   approximated by P Q^T with P (n, r) and Q (m, r): P = M Q, all_reduce
//   P, orthonormalize P, Q = M^T P, all_reduce Q, M ~ P Q^T. Two all_reduces
//   of (n + m) r numbers instead of n m. The error M - P Q^T is kept per
//   rank and added to the next step's gradient (error feedback), so what is
//   dropped now is sent later. One-dimensional gradients (biases) and
//   matrices too small to gain go through a plain all_reduce.
//
// A hook's start() runs inside backward, on the thread running it; it must
// not wait on communication. Everything it needs later lives in the
// PendingReduction it returns, whose wait() leaves in `bucket.buffer` the
// average over ranks (or the hook's approximation of it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace kiln::distributed {

// One bucket of gradients, as the reducer hands it to a hook.
struct GradBucket {
  // Bucket 0 is reduced first in each backward: it holds the parameters
  // registered last (Note [DDP buckets] in reducer.h).
  size_t index = 0;
  // (numel) contiguous: this rank's gradients, one after another. The hook
  // leaves the average over ranks here.
  Tensor buffer;
  // Views into `buffer`, one per parameter, with the parameter's shape.
  std::vector<Tensor> gradients;
  std::vector<std::string> parameter_names;
  // How many times the reducer has reduced this bucket before (0 in the
  // first step); PowerSGD starts compressing after a number of steps.
  int64_t iteration = 0;
};

// A reduction in flight; see Note [DDP communication hooks].
class PendingReduction {
 public:
  virtual ~PendingReduction() = default;
  // Blocks until `bucket.buffer` holds the reduced average; throws the
  // communication's kiln::Error (naming the collective) if it failed.
  virtual void wait() = 0;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  // "allreduce", "fp16_compress", "bf16_compress", "powersgd(rank=1)".
  virtual std::string name() const = 0;
  // Starts averaging `bucket` over `group`; returns without waiting. The
  // bucket object stays alive and untouched until wait() returns.
  virtual std::unique_ptr<PendingReduction> start(ProcessGroup& group, GradBucket& bucket) = 0;
};

std::shared_ptr<CommHook> allreduce_hook();
std::shared_ptr<CommHook> fp16_compress_hook();
std::shared_ptr<CommHook> bf16_compress_hook();

struct PowerSGDOptions {
  // r, the rank of the approximation.
  int64_t matrix_approximation_rank = 1;
  // Steps reduced exactly (plain all_reduce) before compressing, as in
  // PyTorch's PowerSGDState (start_powerSGD_iter): the first steps of
  // training change the gradients' directions fastest.
  int64_t start_iteration = 10;
  // A matrix is compressed only when (n m) / ((n + m) r) is at least this.
  double min_compression_rate = 2.0;
  // Keep M - P Q^T and add it to the next step's gradient.
  bool use_error_feedback = true;
  // Start each step's Q from the last step's (fewer power iterations needed).
  bool warm_start = true;
  // Seeds the first Q; every rank must use the same seed.
  uint64_t seed = 0;
};

std::shared_ptr<CommHook> powersgd_hook(PowerSGDOptions options = {});

}  // namespace kiln::distributed
