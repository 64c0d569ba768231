// The reducer: Note [DDP buckets] and Note [Gradient as bucket view] (reducer.h).
#include "distributed/ddp/reducer.h"

#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "tensor/elementwise.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::distributed {

namespace {

// The AccumulateGrad nodes reachable from `output`: the leaves backward
// from it will give a gradient.
std::unordered_set<const autograd::Node*> reachable_leaves(const Tensor& output) {
  std::unordered_set<const autograd::Node*> seen, leaves;
  const autograd::Edge root = autograd::gradient_edge(output);
  if (!root.valid()) return leaves;
  std::vector<const autograd::Node*> stack = {root.node.get()};
  seen.insert(root.node.get());
  while (!stack.empty()) {
    const autograd::Node* node = stack.back();
    stack.pop_back();
    if (dynamic_cast<const autograd::AccumulateGrad*>(node)) leaves.insert(node);
    for (const autograd::Edge& edge : node->next_edges()) {
      if (edge.valid() && seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
    }
  }
  return leaves;
}

bool is_same_memory(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() == b.data_ptr() && a.shape() == b.shape() &&
         a.dtype() == b.dtype();
}

}  // namespace

Reducer::Reducer(std::vector<Tensor> parameters, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
                 std::shared_ptr<CommHook> hook, ReducerOptions options)
    : group_(std::move(group)), hook_(hook ? std::move(hook) : allreduce_hook()),
      find_unused_(options.find_unused_parameters) {
  KILN_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  KILN_CHECK(parameters.size() == names.size(), "Reducer: ", parameters.size(), " parameters but ", names.size(),
             " names");
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].requires_grad()) continue;
    parameters_.push_back(parameters[i]);
    names_.push_back(names[i]);
  }
  KILN_CHECK(!parameters_.empty(), "DistributedDataParallel: the module has no parameter that requires grad");
  build_buckets(options);
  ready_.assign(parameters_.size(), false);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    hook_handles_.push_back(
        parameters_[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { mark_ready(i, false); }));
  }
}

Reducer::~Reducer() {
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].remove_hook(hook_handles_[i]);
}

void Reducer::set_hook(std::shared_ptr<CommHook> hook) {
  KILN_CHECK(hook != nullptr, "DistributedDataParallel::register_comm_hook: the hook is null");
  KILN_CHECK(!armed_, "DistributedDataParallel::register_comm_hook: a backward is pending; register it before "
                      "the forward");
  hook_ = std::move(hook);
}

void Reducer::build_buckets(const ReducerOptions& options) {
  // Reverse registration order: the order backward produces gradients in.
  // A bucket closes when it is full or the next parameter has another
  // dtype or device (one flat buffer holds one of each).
  bucket_of_.assign(parameters_.size(), 0);
  bucket_views_.assign(parameters_.size(), Tensor());
  std::vector<std::vector<size_t>> groups;
  size_t bytes = 0;
  for (size_t k = parameters_.size(); k-- > 0;) {
    const Tensor& p = parameters_[k];
    const size_t limit = groups.size() <= 1 ? options.first_bucket_bytes : options.bucket_bytes;
    const bool fits = !groups.empty() && bytes + p.nbytes() <= limit &&
                      parameters_[groups.back().front()].dtype() == p.dtype() &&
                      parameters_[groups.back().front()].device() == p.device();
    // An empty current bucket takes any parameter, however large.
    if (groups.empty() || (!fits && bytes > 0)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += p.nbytes();
  }
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    bucket.parameters = groups[b];
    int64_t numel = 0;
    for (size_t k : groups[b]) numel += parameters_[k].numel();
    const Tensor& first = parameters_[groups[b].front()];
    // buffer: (numel) the bucket's gradients one after another.
    bucket.grad_bucket.index = b;
    bucket.grad_bucket.buffer = zeros({numel}, TensorOptions(first.dtype(), first.device()));
    int64_t offset = 0;
    for (size_t k : groups[b]) {
      const Tensor& p = parameters_[k];
      Tensor view = bucket.grad_bucket.buffer.narrow(0, offset, p.numel()).view(p.shape());
      offset += p.numel();
      bucket_of_[k] = b;
      bucket_views_[k] = view;
      bucket.grad_bucket.gradients.push_back(view);
      bucket.grad_bucket.parameter_names.push_back(names_[k]);
      // Note [Gradient as bucket view]: an existing gradient moves in.
      NoGradGuard no_grad;
      if (p.grad().defined()) view.copy_(p.grad());
      p.set_grad(view);
    }
    buckets_.push_back(std::move(bucket));
  }
}

std::vector<std::vector<size_t>> Reducer::bucket_parameters() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.parameters);
  return out;
}

void Reducer::prepare_for_backward(const Tensor& output) {
  KILN_CHECK(!callback_queued_, "DistributedDataParallel: a forward ran while the previous backward was still "
                                "reducing gradients");
  armed_ = true;
  next_bucket_ = 0;
  ready_.assign(parameters_.size(), false);
  has_gradient_.assign(parameters_.size(), true);
  for (Bucket& b : buckets_) {
    b.pending = b.parameters.size();
    b.reduction.reset();
  }
  timeline_ = BackwardTimeline{};
  timeline_.bucket_launched.assign(buckets_.size(), {});
  if (!find_unused_) return;
  const auto used = reachable_leaves(output);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const autograd::Edge edge = autograd::gradient_edge(parameters_[i]);
    if (!used.count(edge.node.get())) mark_ready(i, /*unused=*/true);
  }
}

void Reducer::mark_ready(size_t index, bool unused) {
  // Sync is off (no_sync, or a backward with no DDP forward before it):
  // the gradient stays in .grad() and accumulates there.
  if (!armed_) return;
  KILN_CHECK(!ready_[index], "DistributedDataParallel: parameter '", names_[index],
             "' got its gradient twice in one backward; a parameter used in two backward passes of one forward "
             "(retain_graph) needs a forward for each");
  ready_[index] = true;
  const auto now = BackwardTimeline::Clock::now();
  if (timeline_.first_gradient_ready == BackwardTimeline::Clock::time_point{}) timeline_.first_gradient_ready = now;
  timeline_.last_gradient_ready = now;
  {
    NoGradGuard no_grad;
    const Tensor& p = parameters_[index];
    Tensor& view = bucket_views_[index];
    if (unused) {
      // Not reached by this backward: contributes zero, unless it has a
      // gradient already (accumulated under no_sync, or zeroed in place).
      has_gradient_[index] = p.grad().defined();
      if (!is_same_memory(p.grad(), view)) {
        if (p.grad().defined()) {
          view.copy_(p.grad());
        } else {
          ops::zero_(view);
        }
      }
    } else if (!is_same_memory(p.grad(), view)) {
      view.copy_(p.grad());  // Note [Gradient as bucket view]
    }
    p.set_grad(view);
  }
  if (!callback_queued_ && !unused) {
    callback_queued_ = true;
    autograd::queue_callback([this] { finalize(); });
  }
  Bucket& bucket = buckets_[bucket_of_[index]];
  KILN_CHECK(bucket.pending > 0, "Reducer: bucket ", bucket_of_[index], " was ready already");
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_];
    timeline_.bucket_launched[next_bucket_] = BackwardTimeline::Clock::now();
    bucket.reduction = hook_->start(*group_, bucket.grad_bucket);
    ++next_bucket_;
  }
}

void Reducer::finalize() {
  timeline_.finalize_started = BackwardTimeline::Clock::now();
  callback_queued_ = false;
  armed_ = false;
  // Whatever happens below, the next forward starts afresh.
  std::string missing;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!ready_[i]) missing += (missing.empty() ? "" : ", ") + names_[i];
  }
  if (!missing.empty()) {
    // Wait for what was launched, so that no collective is left in flight
    // on buffers the next step will write.
    for (Bucket& b : buckets_) {
      if (b.reduction) b.reduction->wait();
      b.reduction.reset();
    }
    KILN_FAIL("DistributedDataParallel (rank ", group_->rank(), "): these parameters got no gradient in this ",
              "backward: ", missing, ". If the model does not use every parameter in every step, construct it ",
              "with find_unused_parameters = true");
  }
  for (Bucket& b : buckets_) {
    b.reduction->wait();
    b.reduction.reset();
    ++b.grad_bucket.iteration;
  }
  if (find_unused_) drop_gradients_no_rank_has();
  timeline_.finalize_finished = BackwardTimeline::Clock::now();
}

void Reducer::drop_gradients_no_rank_has() {
  // A parameter no rank used in this step has no gradient in a single
  // process either (.grad() stays undefined, and the optimizer skips it,
  // momentum and all); a zero gradient would still move it by its momentum.
  // One all_reduce (max) of the "has a gradient" flags decides, the same on
  // every rank, as PyTorch's DDP does with its local-used map.
  std::vector<int32_t> flags(has_gradient_.begin(), has_gradient_.end());
  Tensor any = from_vector<int32_t>(flags, {static_cast<int64_t>(flags.size())}).to(group_->collective_device());
  group_->all_reduce(any, ReduceOp::Max)->wait();
  any = any.cpu();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (any.at<int32_t>({static_cast<int64_t>(i)}) == 0) parameters_[i].set_grad(Tensor());
  }
}

}  // namespace kiln::distributed
