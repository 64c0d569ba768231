// The reducer: averages DistributedDataParallel's gradients over the ranks,
// bucket by bucket, while backward is still running.
//
// Note [DDP buckets]
// One all_reduce per parameter would pay a collective's latency dozens of
// times per step; one all_reduce of all gradients would wait for the whole
// backward before sending a byte. DDP packs the parameters into buckets:
//
// - In reverse registration order, because backward produces the last
//   layers' gradients first (Note [Backward execution order]). The first
//   bucket is small (1 MiB by default) so that communication starts as early
//   as possible; the others hold up to 25 MiB, PyTorch's defaults. A bucket
//   holds one dtype on one device.
// - Each bucket is one flat buffer, and each parameter's .grad() is a view
//   into it (Note [Gradient as bucket view]), so the all_reduce needs no
//   copy in or out.
// - Every parameter has a post-accumulate hook. When it fires the gradient
//   is complete; when a bucket's last gradient is complete, the bucket is
//   handed to the communication hook (comm_hook.h), which starts an
//   asynchronous all_reduce and returns, and backward goes on computing the
//   earlier layers' gradients while the bytes travel.
// - Buckets are launched in index order, bucket b only after bucket b - 1:
//   collectives must be issued in the same order on every rank, and the
//   order in which gradients become ready could differ between ranks.
// - On the first ready gradient the reducer queues a callback with the
//   autograd engine (autograd::queue_callback) that runs when backward has
//   finished: it waits for every bucket's reduction, so backward() returns
//   with every gradient averaged and the optimizer can step.
//
// Note [Gradient as bucket view]
// Before training each parameter's .grad() is set to its view of the
// bucket. Backward adds into an existing .grad() in place, so gradients land
// in the bucket directly. An optimizer's zero_grad(set_to_none) drops the
// view; backward then makes a fresh .grad(), which the hook copies into the
// bucket and replaces with the view again: one copy per parameter, the
// price PyTorch pays without gradient_as_bucket_view.
//
// Unused parameters. A parameter that backward never reaches has no hook
// firing, so its bucket would never be launched and the ranks would wait for
// each other. With find_unused_parameters, prepare_for_backward() walks the
// autograd graph from the forward's output and marks the parameters it
// cannot reach as ready at once, with a zero gradient (averaged like any
// other: a rank that did use it contributes its gradient); a parameter that
// no rank used ends the step with no gradient at all, as it would in one
// process. Without the flag,
// the end-of-backward callback finds the bucket incomplete and throws a
// kiln::Error naming the parameters that got no gradient.
//
// Gradient accumulation. While sync is off (DistributedDataParallel's
// no_sync()), the hooks do nothing: gradients accumulate in .grad() locally,
// and the first backward with sync on all-reduces the accumulated sums.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp/comm_hook.h"
#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace kiln::distributed {

struct ReducerOptions {
  size_t first_bucket_bytes = size_t{1} << 20;
  size_t bucket_bytes = size_t{25} << 20;
  bool find_unused_parameters = false;
};

// When the last backward's buckets were launched, relative to its gradients
// (for tests and benchmarks of the overlap).
struct BackwardTimeline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point first_gradient_ready;
  Clock::time_point last_gradient_ready;
  std::vector<Clock::time_point> bucket_launched;  // one per bucket, in index order
  Clock::time_point finalize_started;              // backward's graph had finished
  Clock::time_point finalize_finished;             // every bucket reduced
};

class Reducer {
 public:
  // `parameters` in registration order with their names; only those that
  // require grad take part. Sets each one's .grad() to its bucket view.
  Reducer(std::vector<Tensor> parameters, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
          std::shared_ptr<CommHook> hook, ReducerOptions options);
  // Removes the parameters' hooks.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Arms the reducer for the backward of `output` (called after each
  // forward that will be differentiated with sync on); with
  // find_unused_parameters, marks the parameters `output` does not depend
  // on as ready.
  void prepare_for_backward(const Tensor& output);

  void set_hook(std::shared_ptr<CommHook> hook);
  const CommHook& hook() const { return *hook_; }

  // The buckets: bucket b's parameter indices (into the constructor's
  // list), in the order they sit in its buffer.
  std::vector<std::vector<size_t>> bucket_parameters() const;
  const BackwardTimeline& last_timeline() const { return timeline_; }

 private:
  struct Bucket {
    GradBucket grad_bucket;                 // what the hook sees
    std::vector<size_t> parameters;         // indices into parameters_
    size_t pending = 0;                     // gradients not ready yet this backward
    std::unique_ptr<PendingReduction> reduction;  // while launched
  };

  void build_buckets(const ReducerOptions& options);
  // From the post-accumulate hook of parameter `index`.
  void mark_ready(size_t index, bool unused);
  // Launches every bucket, in order, whose gradients are all ready.
  void launch_ready_buckets();
  // The end-of-backward callback: waits for every bucket.
  void finalize();
  // With find_unused_parameters: clears .grad() of the parameters that no
  // rank had a gradient for in this step.
  void drop_gradients_no_rank_has();

  std::vector<Tensor> parameters_;
  std::vector<std::string> names_;
  std::vector<size_t> bucket_of_;        // parameter -> bucket
  std::vector<Tensor> bucket_views_;     // parameter -> its view of the bucket buffer
  std::vector<int64_t> hook_handles_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<CommHook> hook_;
  bool find_unused_;
  std::vector<Bucket> buckets_;

  // State of the current backward.
  bool armed_ = false;                 // prepare_for_backward() was called
  bool callback_queued_ = false;
  std::vector<bool> ready_;            // per parameter
  std::vector<bool> has_gradient_;     // per parameter: false if unused and without a gradient
  size_t next_bucket_ = 0;             // the next bucket to launch
  BackwardTimeline timeline_;
};

}  // namespace kiln::distributed
