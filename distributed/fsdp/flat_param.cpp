#include "distributed/fsdp/flat_param.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace kiln::distributed::fsdp {

namespace {

// Note [FSDP unit padding]: the smallest n >= minimum with n % count == index.
int64_t padded_shard_numel(int64_t minimum, size_t index, size_t count) {
  auto u = static_cast<int64_t>(count), i = static_cast<int64_t>(index);
  int64_t n = minimum + ((i - minimum % u) % u + u) % u;
  return n;
}

}  // namespace

FlatParamUnit::FlatParamUnit(size_t index, std::string name, const std::vector<std::pair<std::string, Tensor>>& params,
                             UnitContext context)
    : index_(index), name_(std::move(name)), context_(std::move(context)) {
  KILN_CHECK(!params.empty(), "FSDP: ", describe(), " has no parameters");
  dtype_ = params.front().second.dtype();
  storage_device_ = context_.cpu_offload ? kCPU : params.front().second.device();
  for (const auto& [param_name, param] : params) {
    KILN_CHECK(param.dtype() == dtype_, "FSDP: the parameters of ", describe(), " must share one dtype, but '",
               params.front().first, "' is ", dtype_, " and '", param_name, "' is ", param.dtype());
    KILN_CHECK(param.device() == params.front().second.device(), "FSDP: the parameters of ", describe(),
               " must be on one device, but '", params.front().first, "' is on ", params.front().second.device(),
               " and '", param_name, "' on ", param.device());
    Member m;
    m.name = param_name;
    m.param = param;
    m.shape = param.shape();
    m.offset = numel_;
    m.numel = param.numel();
    numel_ += m.numel;
    members_.push_back(std::move(m));
  }
  const int64_t S = context_.shard_size;
  shard_numel_ = padded_shard_numel((numel_ + S - 1) / S, index_, context_.unit_count);
  DType compute_dtype = context_.param_dtype.value_or(dtype_);
  needs_gather_ = S > 1 || compute_dtype != dtype_ || storage_device_ != context_.compute_device;

  // This rank's shard: the flat elements [rank * shard_numel, (rank + 1) * shard_numel).
  const int64_t begin = context_.shard_rank * shard_numel_, end = begin + shard_numel_;
  shard_ = zeros({shard_numel_}, TensorOptions(dtype_, storage_device_));
  NoGradGuard no_grad;
  for (Member& m : members_) {
    int64_t a = std::clamp(m.offset, begin, end), b = std::clamp(m.offset + m.numel, begin, end);
    m.local_begin = a - m.offset;
    m.local_end = std::max(b - m.offset, m.local_begin);
    if (b > a) {
      Tensor source = m.param.contiguous().view({m.numel}).narrow(0, m.local_begin, b - a);
      shard_.narrow(0, a - begin, b - a).copy_(source);
    }
    m.param.impl()->set_storage(shard_part(m, shard_), {m.local_end - m.local_begin});
  }
  if (!needs_gather_) {
    // The shard is the whole unit: the parameters live as views of it.
    full_ = shard_;
    for (Member& m : members_) m.param.impl()->set_storage(full_.narrow(0, m.offset, m.numel), m.shape);
    state_ = State::Gathered;
  }
}

std::string FlatParamUnit::describe() const {
  if (name_.empty()) return "the root unit";
  return "unit " + std::to_string(index_) + " '" + name_ + "'";
}

template <class F>
auto FlatParamUnit::naming_errors(const char* what, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error("FSDP: the " + std::string(what) + " of " + describe() + " (" + std::to_string(shard_numel_) +
                    " elements per rank) failed: " + e.message(),
                e.file(), e.line());
  }
}

Tensor FlatParamUnit::shard_part(const Member& m, const Tensor& flat_shard) const {
  int64_t begin = context_.shard_rank * shard_numel_;
  int64_t length = m.local_end - m.local_begin;
  int64_t start = length > 0 ? m.offset + m.local_begin - begin : 0;
  return flat_shard.narrow(0, start, length);
}

void FlatParamUnit::start_gather() {
  if (state_ != State::Sharded) return;
  DType compute_dtype = context_.param_dtype.value_or(dtype_);
  gather_send_ = shard_.to(compute_dtype, context_.compute_device);
  if (context_.shard_size == 1) {
    full_ = gather_send_;
    state_ = State::Gathering;
    return;
  }
  full_ = empty({shard_numel_ * context_.shard_size}, TensorOptions(compute_dtype, context_.compute_device));
  gather_work_ = naming_errors("all-gather", [&] {
    return context_.shard_group->all_gather_into_tensor(full_, gather_send_);
  });
  state_ = State::Gathering;
}

void FlatParamUnit::finish_gather() {
  if (state_ == State::Gathered) return;
  if (state_ == State::Sharded) start_gather();
  if (gather_work_) {
    naming_errors("all-gather", [&] { gather_work_->wait(); });
    gather_work_.reset();
  }
  gather_send_ = Tensor();
  for (Member& m : members_) m.param.impl()->set_storage(full_.narrow(0, m.offset, m.numel), m.shape);
  state_ = State::Gathered;
}

bool FlatParamUnit::gather_complete() const {
  return state_ != State::Gathering || !gather_work_ || gather_work_->is_completed();
}

void FlatParamUnit::write_back_full() {
  if (!needs_gather_ || state_ != State::Gathered) return;
  NoGradGuard no_grad;
  const int64_t begin = context_.shard_rank * shard_numel_;
  Tensor mine = full_.narrow(0, begin, shard_numel_);
  shard_.copy_(mine.to(dtype_, storage_device_));
}

void FlatParamUnit::reshard() {
  if (!needs_gather_) return;
  if (state_ == State::Gathering) finish_gather();  // a prefetch nobody used: wait before freeing
  if (state_ == State::Sharded) return;
  for (Member& m : members_) m.param.impl()->set_storage(shard_part(m, shard_), {m.local_end - m.local_begin});
  full_ = Tensor();
  state_ = State::Sharded;
  assign_gradients();
}

void FlatParamUnit::prepare_gradients() {
  NoGradGuard no_grad;
  // Called while the parameters are gathered: their gradients, if any, are
  // still those of their shard parts (1-d, local length), from an earlier
  // backward without zero_grad. They are put aside and added back later.
  bool any = false;
  for (const Member& m : members_) any = any || m.param.grad().defined();
  if (any) {
    Tensor stash = grad_stash_.defined() ? grad_stash_ : zeros({shard_numel_}, TensorOptions(dtype_, storage_device_));
    for (const Member& m : members_) {
      Tensor g = m.param.grad();
      if (!g.defined()) continue;
      KILN_CHECK(g.numel() == m.local_end - m.local_begin, "FSDP: the gradient of '", m.name, "' in ", describe(),
                 " has ", g.numel(), " elements, but this rank holds ", m.local_end - m.local_begin,
                 " of the parameter; gradients between steps must keep the shard's shape");
      Tensor part = shard_part(m, stash);
      ops::add_(part, g.view({part.numel()}).to(dtype_, storage_device_));
      m.param.set_grad(Tensor());
    }
    grad_stash_ = stash;
  }
  // Note [FSDP gradients in place]: backward accumulates straight into the
  // flat buffer the reduction reads (kept across no_sync backwards).
  if (!flat_grad_.defined()) {
    DType reduce_dtype = context_.reduce_dtype.value_or(context_.param_dtype.value_or(dtype_));
    flat_grad_ = zeros({shard_numel_ * context_.shard_size}, TensorOptions(reduce_dtype, context_.compute_device));
  }
  for (const Member& m : members_) {
    if (m.param.requires_grad()) m.param.set_grad(flat_grad_.narrow(0, m.offset, m.numel).view(m.shape));
  }
}

void FlatParamUnit::start_reduce(bool sync) {
  NoGradGuard no_grad;
  if (!flat_grad_.defined()) prepare_gradients();
  // The gradients are views of flat_grad_ unless someone replaced one (a
  // gradient hook returning a new tensor): those are added in.
  for (const Member& m : members_) {
    Tensor g = m.param.grad();
    m.param.set_grad(Tensor());
    if (!g.defined()) continue;
    Tensor target = flat_grad_.narrow(0, m.offset, m.numel).view(m.shape);
    if (g.data_ptr() == target.data_ptr() && g.strides() == target.strides()) continue;
    KILN_CHECK(g.shape() == m.shape, "FSDP: the gradient of '", m.name, "' in ", describe(), " has shape ",
               g.shape(), " but the parameter's is ", m.shape);
    target.copy_(g);
  }
  if (!sync) return;  // flat_grad_ keeps the sum for the next synchronised backward
  Tensor flat = std::move(flat_grad_);
  flat_grad_ = Tensor();
  reduce_input_ = flat;
  if (context_.shard_size > 1) {
    reduce_output_ = empty({shard_numel_}, TensorOptions(flat.dtype(), context_.compute_device));
    reduce_work_ = naming_errors("gradient reduce-scatter", [&] {
      return context_.shard_group->reduce_scatter_tensor(reduce_output_, reduce_input_, ReduceOp::Sum);
    });
  } else {
    reduce_output_ = reduce_input_;
    if (context_.replicate_group) {
      reduce_work_ = naming_errors("gradient all-reduce", [&] {
        return context_.replicate_group->all_reduce(reduce_output_, ReduceOp::Sum);
      });
    }
  }
  reduce_in_flight_ = true;
}

void FlatParamUnit::finish_reduce() {
  if (!reduce_in_flight_) return;
  reduce_in_flight_ = false;
  if (reduce_work_) {
    naming_errors("gradient reduction", [&] { reduce_work_->wait(); });
    reduce_work_.reset();
  }
  if (context_.shard_size > 1 && context_.replicate_group) {
    // HYBRID_SHARD: the shard group's sum, summed again over the ranks
    // holding the same shard in the other replica groups.
    naming_errors("gradient all-reduce across replicas", [&] {
      context_.replicate_group->all_reduce(reduce_output_, ReduceOp::Sum)->wait();
    });
  }
  reduce_input_ = Tensor();
  NoGradGuard no_grad;
  Tensor grad_shard = reduce_output_.to(dtype_, storage_device_);
  reduce_output_ = Tensor();
  ops::mul_(grad_shard, 1.0 / context_.world_size);
  if (grad_stash_.defined()) {
    ops::add_(grad_shard, grad_stash_);
    grad_stash_ = Tensor();
  }
  // A unit with frozen parameters is still gathered here (its reshard waits
  // for the end of backward): its gradients are handed out when it reshards.
  pending_grad_shard_ = grad_shard;
  if (state_ == State::Sharded || !needs_gather_) assign_gradients();
}

void FlatParamUnit::assign_gradients() {
  if (!pending_grad_shard_.defined()) return;
  for (Member& m : members_) {
    if (!m.param.requires_grad()) continue;  // a frozen parameter gets none, as without FSDP
    Tensor part = shard_part(m, pending_grad_shard_);
    // The parameter has the shape of its shard part once resharded, or its
    // full shape when the unit stays gathered (NO_SHARD).
    m.param.set_grad(part.view(m.param.shape()));
  }
  pending_grad_shard_ = Tensor();
}

double FlatParamUnit::local_grad_norm_term(double p) const {
  double term = 0;
  for (const Member& m : members_) {
    Tensor g = m.param.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (std::isinf(p)) {
      term = std::max(term, ops::max(ops::abs(g.to(DType::Float64))).item<double>());
    } else {
      term += ops::sum(ops::pow(ops::abs(g.to(DType::Float64)), p)).item<double>();
    }
  }
  return term;
}

}  // namespace kiln::distributed::fsdp
