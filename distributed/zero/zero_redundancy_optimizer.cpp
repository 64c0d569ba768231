// ZeroRedundancyOptimizer: the partition, the step and stage 2's gradient
// reduction (Note [ZeRO stages] in the header). The state dict is in
// zero_state_dict.cpp.
#include "distributed/zero/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "distributed/init.h"
#include "distributed/replica_sync.h"
#include "tensor/elementwise.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace kiln::distributed {

namespace {

// Elements [offset, offset + numel) of a flat buffer, with `like`'s shape.
Tensor slice_like(const Tensor& flat, int64_t offset, const Tensor& like) {
  return flat.narrow(0, offset, like.numel()).view(like.shape());
}

bool is_same_memory(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() == b.data_ptr() && a.shape() == b.shape() && a.dtype() == b.dtype();
}

}  // namespace

std::vector<int> zero_partition(const std::vector<int64_t>& numels, int world) {
  KILN_CHECK(world >= 1, "zero_partition: the world size must be at least 1, got ", world);
  const size_t n = numels.size();
  KILN_CHECK(n >= static_cast<size_t>(world), "zero_partition: ", n, " parameters cannot be shared by ", world,
             " ranks: each rank must own at least one");
  int64_t largest = 0, total = 0;
  for (size_t k = 0; k < n; ++k) {
    KILN_CHECK(numels[k] >= 0, "zero_partition: parameter ", k, " has ", numels[k], " elements");
    largest = std::max(largest, numels[k]);
    total += numels[k];
  }
  // The fewest runs of at most `bound` elements, filled greedily; the
  // smallest bound that needs at most `world` runs, found by bisection.
  auto runs_needed = [&](int64_t bound) {
    int runs = 1;
    int64_t sum = 0;
    for (int64_t w : numels) {
      if (sum + w > bound) {
        ++runs;
        sum = 0;
      }
      sum += w;
    }
    return runs;
  };
  int64_t lo = largest, hi = total;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (runs_needed(mid) <= world) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  // Each run as long as the bound allows while leaving a parameter for
  // every later run; the last takes the rest, which fits (the greedy runs
  // above ended no later than these).
  std::vector<int> owner(n, world - 1);
  size_t k = 0;
  for (int r = 0; r + 1 < world; ++r) {
    int64_t sum = numels[k];
    owner[k++] = r;
    const size_t later_runs = static_cast<size_t>(world - r - 1);
    while (k < n && sum + numels[k] <= lo && n - (k + 1) >= later_runs) {
      sum += numels[k];
      owner[k++] = r;
    }
  }
  return owner;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const std::vector<Tensor>& params, OptimizerFactory make_optimizer,
                                                 ZeroOptions options)
    : ZeroRedundancyOptimizer(std::vector<optim::ParamGroup>{{params, {}}}, std::move(make_optimizer),
                              std::move(options)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, OptimizerFactory make_optimizer,
                                                 ZeroOptions options)
    : group_(options.group), options_(std::move(options)), groups_(std::move(groups)) {
  if (!group_) group_ = default_group_ptr();
  KILN_CHECK(options_.stage == 1 || options_.stage == 2, "ZeroRedundancyOptimizer: stage must be 1 or 2, got ",
             options_.stage, " (stage 3 is FullyShardedDataParallel)");
  KILN_CHECK(options_.reductions_in_flight >= 1,
             "ZeroRedundancyOptimizer: reductions_in_flight must be at least 1, got ", options_.reductions_in_flight);
  KILN_CHECK(make_optimizer != nullptr, "ZeroRedundancyOptimizer: the optimizer factory is empty");
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const Tensor& p : groups_[g].params) {
      params_.push_back(p);
      group_of_.push_back(g);
    }
  }
  check_parameters();
  // Named by group and place in it, for the error that names a parameter
  // some rank has in another dtype or shape.
  TensorDict named;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t j = 0; j < groups_[g].params.size(); ++j) {
      named.insert("group " + std::to_string(g) + " #" + std::to_string(j), groups_[g].params[j]);
    }
  }
  if (options_.stage == 2) claim_ = std::make_unique<GradientReductionClaim>(named, "ZeroRedundancyOptimizer (stage 2)");
  check_same_parameters_on_every_rank(*group_, named, "ZeroRedundancyOptimizer");
  KILN_CHECK(params_.size() >= static_cast<size_t>(group_->size()), "ZeroRedundancyOptimizer: ", params_.size(),
             " parameters cannot be shared by ", group_->size(), " ranks: each rank must own at least one");
  if (options_.broadcast_from_rank0) broadcast_from_rank0(*group_, params_);
  std::vector<int64_t> numels;
  for (const Tensor& p : params_) numels.push_back(p.numel());
  owner_ = zero_partition(numels, group_->size());
  build_local_optimizer(make_optimizer);
  build_buckets();
  if (options_.stage == 2) install_gradient_hooks();
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  for (const auto& [index, handle] : hook_handles_) params_[index].remove_hook(handle);
}

void ZeroRedundancyOptimizer::check_parameters() const {
  KILN_CHECK(!params_.empty(), "ZeroRedundancyOptimizer: got an empty parameter list");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const std::string which = "parameter " + std::to_string(i) + " (group " + std::to_string(group_of_[i]) + ")";
    KILN_CHECK(p.defined(), "ZeroRedundancyOptimizer: ", which, " is undefined");
    KILN_CHECK(p.is_floating_point(), "ZeroRedundancyOptimizer: ", which, " has dtype ", p.dtype(),
               "; only floating-point tensors can be optimized");
    KILN_CHECK(p.is_leaf(), "ZeroRedundancyOptimizer: ", which, " is not a leaf (it was computed by ", p.grad_fn_name(),
               "); only leaf tensors can be optimized");
    KILN_CHECK(seen.insert(p.impl()).second, "ZeroRedundancyOptimizer: ", which,
               " is listed twice (in one group or in two)");
  }
}

void ZeroRedundancyOptimizer::build_local_optimizer(const OptimizerFactory& make_optimizer) {
  // The owned parameters are one contiguous run of the global numbering, so
  // the local optimizer's numbering (across its groups, in order) is the
  // global one shifted: local parameter k is parameter k + the run's first.
  std::vector<optim::ParamGroup> owned(groups_.size());
  local_index_.assign(params_.size(), -1);
  int64_t next = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!owns(i)) continue;
    owned[group_of_[i]].params.push_back(params_[i]);
    local_index_[i] = next++;
  }
  for (size_t g = 0; g < groups_.size(); ++g) owned[g].options = groups_[g].options;
  local_ = make_optimizer(owned);
  KILN_CHECK(local_ != nullptr, "ZeroRedundancyOptimizer: the optimizer factory returned null");
  KILN_CHECK(local_->num_param_groups() == owned.size(), "ZeroRedundancyOptimizer: the factory's ", local_->name(),
             " has ", local_->num_param_groups(), " param groups but was given ", owned.size(),
             "; it must be built over the groups it is given");
  for (size_t g = 0; g < owned.size(); ++g) {
    const auto& made = local_->params(g);
    bool same = made.size() == owned[g].params.size();
    for (size_t j = 0; same && j < made.size(); ++j) same = made[j].is_same(owned[g].params[j]);
    KILN_CHECK(same, "ZeroRedundancyOptimizer: param group ", g, " of the factory's ", local_->name(),
               " holds other parameters than it was given; it must be built over the groups it is given");
  }
}

void ZeroRedundancyOptimizer::build_buckets() {
  // Reverse order, the order backward produces gradients in; a bucket stays
  // inside one owner's run and holds one dtype on one device.
  bucket_of_.assign(params_.size(), -1);
  bucket_offset_.assign(params_.size(), 0);
  size_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    if (!p.requires_grad()) continue;
    bool fits = false;
    if (!buckets_.empty()) {
      const Bucket& b = buckets_.back();
      fits = b.owner == owner_[k] && b.dtype == p.dtype() && b.device == p.device() &&
             bytes + p.nbytes() <= options_.bucket_cap_bytes;
    }
    if (!fits) {
      Bucket b;
      b.owner = owner_[k];
      b.dtype = p.dtype();
      b.device = p.device();
      buckets_.push_back(std::move(b));
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = static_cast<int64_t>(buckets_.size() - 1);
    bucket_offset_[k] = b.numel;
    b.params.push_back(k);
    b.numel += p.numel();
    bytes += p.nbytes();
  }
  if (options_.stage != 2) return;
  // The owner's gradients live in its buckets' `owned` buffers; an existing
  // gradient moves in, and the others' gradients are not kept.
  NoGradGuard no_grad;
  owned_views_.assign(params_.size(), Tensor());
  for (Bucket& b : buckets_) {
    if (b.owner != group_->rank()) continue;
    b.owned = zeros({b.numel}, TensorOptions(b.dtype, b.device));
    for (size_t k : b.params) owned_views_[k] = slice_like(b.owned, bucket_offset_[k], params_[k]);
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    if (bucket_of_[k] < 0 || !params_[k].grad().defined()) continue;
    if (owns(k)) {
      owned_views_[k].copy_(params_[k].grad());
      params_[k].set_grad(owned_views_[k]);
    } else {
      params_[k].set_grad(Tensor());
    }
  }
}

void ZeroRedundancyOptimizer::install_gradient_hooks() {
  ready_.assign(params_.size(), false);
  accumulate_.assign(params_.size(), false);
  for (size_t k = 0; k < params_.size(); ++k) {
    if (bucket_of_[k] < 0) continue;
    hook_handles_.emplace_back(k, params_[k].register_hook([this, k](const Tensor&) {
      before_accumulate(k);
      return Tensor();
    }));
    hook_handles_.emplace_back(
        k, params_[k].register_post_accumulate_grad_hook([this, k](const Tensor&) { after_accumulate(k); }));
  }
}

std::string ZeroRedundancyOptimizer::describe_param(size_t index) const {
  const Tensor& p = params_[index];
  return detail::str("parameter ", index, " (group ", group_of_[index], ", ", p.dtype(), " ", p.shape(), ")");
}

const std::vector<Tensor>& ZeroRedundancyOptimizer::params(size_t group) const {
  KILN_CHECK(group < groups_.size(), "ZeroRedundancyOptimizer: no param group ", group, " (there are ", groups_.size(),
             ")");
  return groups_[group].params;
}

double ZeroRedundancyOptimizer::lr(size_t group) const { return local_->lr(group); }

void ZeroRedundancyOptimizer::set_lr(size_t group, double lr) { local_->set_lr(group, lr); }

std::vector<int64_t> ZeroRedundancyOptimizer::partition_numels() const {
  std::vector<int64_t> numels(static_cast<size_t>(group_->size()), 0);
  for (size_t i = 0; i < params_.size(); ++i) numels[static_cast<size_t>(owner_[i])] += params_[i].numel();
  return numels;
}

std::vector<std::vector<size_t>> ZeroRedundancyOptimizer::bucket_parameters() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

// ---- stage 2: gradients ------------------------------------------------------

void ZeroRedundancyOptimizer::before_accumulate(size_t index) {
  if (!in_backward_) {
    in_backward_ = true;
    ready_.assign(params_.size(), false);
    next_launch_ = next_finish_ = 0;
    for (Bucket& b : buckets_) {
      b.pending = b.params.size();
      b.buffer = Tensor();
      b.work.reset();
    }
    autograd::queue_callback([this] { finish_backward(); });
  }
  KILN_CHECK(!ready_[index], "ZeroRedundancyOptimizer (rank ", group_->rank(), "): ", describe_param(index),
             " got its gradient twice in one backward");
  // Move what the parameter holds aside, so that backward leaves this
  // backward's local gradient alone in .grad(): the owner adds the average
  // to what it held (finish_bucket), the others keep nothing.
  NoGradGuard no_grad;
  const Tensor& p = params_[index];
  Tensor held = p.grad();
  if (owns(index)) {
    accumulate_[index] = held.defined();
    if (held.defined() && !is_same_memory(held, owned_views_[index])) owned_views_[index].copy_(held);
  }
  if (held.defined()) p.set_grad(Tensor());
}

void ZeroRedundancyOptimizer::after_accumulate(size_t index) {
  NoGradGuard no_grad;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of_[index])];
  if (!b.buffer.defined()) b.buffer = empty({b.numel}, TensorOptions(b.dtype, b.device));
  const Tensor& p = params_[index];
  slice_like(b.buffer, bucket_offset_[index], p).copy_(p.grad());
  p.set_grad(Tensor());
  ready_[index] = true;
  KILN_CHECK(b.pending > 0, "ZeroRedundancyOptimizer: bucket ", bucket_of_[index], " was complete already");
  if (--b.pending == 0) launch_ready_buckets();
}

void ZeroRedundancyOptimizer::launch_ready_buckets() {
  // In index order on every rank, whatever order the gradients came in.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = group_->reduce(b.buffer, b.owner, ReduceOp::Avg);
    while (next_launch_ - next_finish_ > static_cast<size_t>(options_.reductions_in_flight)) {
      finish_bucket(next_finish_++);
    }
  }
}

void ZeroRedundancyOptimizer::finish_bucket(size_t bucket) {
  Bucket& b = buckets_[bucket];
  b.work->wait();
  b.work.reset();
  if (b.owner == group_->rank()) {
    NoGradGuard no_grad;
    for (size_t k : b.params) {
      Tensor& view = owned_views_[k];
      const Tensor average = slice_like(b.buffer, bucket_offset_[k], view);
      if (accumulate_[k]) {
        ops::add_(view, average);
      } else {
        view.copy_(average);
      }
      params_[k].set_grad(view);
    }
  }
  b.buffer = Tensor();
}

void ZeroRedundancyOptimizer::finish_backward() {
  in_backward_ = false;
  std::string missing;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (bucket_of_[k] >= 0 && !ready_[k]) missing += (missing.empty() ? "" : ", ") + describe_param(k);
  }
  if (!missing.empty()) {
    // Wait for what was launched, so that no collective is left writing
    // into buffers, then drop them.
    for (; next_finish_ < next_launch_; ++next_finish_) buckets_[next_finish_].work->wait();
    for (Bucket& b : buckets_) {
      b.work.reset();
      b.buffer = Tensor();
    }
    KILN_FAIL("ZeroRedundancyOptimizer (rank ", group_->rank(), "): these parameters got no gradient in this ",
              "backward: ", missing, ". At stage 2 every parameter that requires grad must get one in every ",
              "backward; set requires_grad to false on those the model does not use");
  }
  while (next_finish_ < next_launch_) finish_bucket(next_finish_++);
}

// ---- the step ----------------------------------------------------------------

void ZeroRedundancyOptimizer::step() {
  KILN_CHECK(!in_backward_, "ZeroRedundancyOptimizer::step: a backward is still reducing gradients");
  consolidated_.reset();
  local_->step();
  broadcast_parameters();
}

void ZeroRedundancyOptimizer::broadcast_parameters() {
  if (group_->size() == 1) return;
  NoGradGuard no_grad;
  const int rank = group_->rank();
  std::vector<Tensor> flats(buckets_.size());
  std::vector<WorkPtr> works(buckets_.size());
  std::deque<size_t> in_flight;
  auto finish = [&](size_t i) {
    works[i]->wait();
    if (buckets_[i].owner != rank) {
      for (size_t k : buckets_[i].params) Tensor(params_[k]).copy_(slice_like(flats[i], bucket_offset_[k], params_[k]));
    }
    flats[i] = Tensor();
    works[i].reset();
  };
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    // flat: (numel) the bucket's parameters one after another.
    flats[i] = empty({b.numel}, TensorOptions(b.dtype, b.device));
    if (b.owner == rank) {
      for (size_t k : b.params) slice_like(flats[i], bucket_offset_[k], params_[k]).copy_(params_[k]);
    }
    works[i] = group_->broadcast(flats[i], b.owner);
    in_flight.push_back(i);
    if (in_flight.size() > static_cast<size_t>(options_.reductions_in_flight)) {
      finish(in_flight.front());
      in_flight.pop_front();
    }
  }
  for (size_t i : in_flight) finish(i);
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) { optim::zero_grads(params_, set_to_none); }

double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  KILN_CHECK(norm_type > 0.0, "ZeroRedundancyOptimizer::clip_grad_norm_: norm_type must be positive or infinity, got ",
             norm_type);
  KILN_CHECK(!in_backward_, "ZeroRedundancyOptimizer::clip_grad_norm_: a backward is still reducing gradients");
  NoGradGuard no_grad;
  const bool infinity = std::isinf(norm_type);
  std::vector<Tensor> grads;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (owns(k) && params_[k].grad().defined()) grads.push_back(params_[k].grad());
  }
  // This rank's part: the largest |g|, or the sum of |g|^p in float64, and
  // whether a NaN was seen (a maximum over ranks need not keep a NaN).
  double part = 0.0;
  bool nan = false;
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    if (infinity) {
      const double m = ops::amax(ops::abs(g)).item<double>();
      nan = nan || std::isnan(m);
      part = std::max(part, m);
    } else {
      Tensor g64 = g.to(DType::Float64);
      Tensor powered = norm_type == 2.0   ? ops::mul(g64, g64)
                       : norm_type == 1.0 ? ops::abs(g64)
                                          : ops::pow(ops::abs(g64), norm_type);
      part += ops::sum(powered).item<double>();
    }
  }
  Tensor both = from_vector<double>({part, nan ? 1.0 : 0.0}, {2}).to(group_->collective_device());
  group_->all_reduce(both, infinity ? ReduceOp::Max : ReduceOp::Sum)->wait();
  both = both.cpu();
  double total = infinity ? both.at<double>({0}) : std::pow(both.at<double>({0}), 1.0 / norm_type);
  if (both.at<double>({1}) > 0.0) total = std::nan("");
  const double clip_coef = std::min(max_norm / (total + 1e-6), 1.0);
  if (clip_coef != 1.0) {
    for (Tensor& g : grads) ops::mul_(g, clip_coef);
  }
  return total;
}

}  // namespace kiln::distributed
