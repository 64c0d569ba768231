// Full state dicts of an FSDP model and its optimizer (state_dict.h): each
// parameter, and each per-element optimizer state, gathered from the shards
// in its master dtype.
//
// The gather is written against the shard layout (which elements each rank
// holds), not against FSDP's own all-gather of a unit: that one gathers in
// the compute dtype (bfloat16 under mixed precision), and optimizer state
// has no unit to gather with. One all-gather of every rank's (offset, numel)
// per parameter comes first; each tensor is then one all-gather (or gather
// to rank 0) of the ranks' parts padded to the longest, copied into place,
// so every element arrives exactly as it was, bits and all.
#include <algorithm>

#include "autograd/grad_mode.h"
#include "distributed/fsdp/state_dict.h"
#include "distributed/fsdp/state_dict_internal.h"
#include "tensor/factory.h"

namespace kiln::distributed::fsdp {

namespace {

// Which elements each rank holds of each parameter: [param][rank].
struct Layout {
  std::vector<std::vector<int64_t>> offsets;
  std::vector<std::vector<int64_t>> numels;
};

Layout gather_layout(ProcessGroup& group, const std::vector<ParamShard>& params) {
  const int64_t count = static_cast<int64_t>(params.size()), world = group.size();
  Layout layout{std::vector<std::vector<int64_t>>(count, std::vector<int64_t>(world)),
                std::vector<std::vector<int64_t>>(count, std::vector<int64_t>(world))};
  if (count == 0) return layout;  // every rank has the same parameters (FSDP checked)
  Tensor mine = Tensor::empty({2 * count}, DType::Int64);
  for (int64_t i = 0; i < count; ++i) {
    mine.data<int64_t>()[2 * i] = params[i].offset;
    mine.data<int64_t>()[2 * i + 1] = params[i].local_numel;
  }
  const Device device = group.collective_device();
  Tensor all = Tensor::empty({world * 2 * count}, {DType::Int64, device});
  group.all_gather_into_tensor(all, mine.to(device))->wait();
  all = all.cpu();
  for (int64_t r = 0; r < world; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      layout.offsets[i][r] = all.data<int64_t>()[(r * count + i) * 2];
      layout.numels[i][r] = all.data<int64_t>()[(r * count + i) * 2 + 1];
    }
  }
  return layout;
}

// The tensor of `shape` of which rank r holds elements [offsets[r],
// offsets[r] + numels[r]) as its `local`: a new CPU tensor on every rank
// (to_all) or on rank 0 only (undefined elsewhere). Collective.
Tensor gather_full(ProcessGroup& group, const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                   const Tensor& local, const Shape& shape, bool to_all) {
  const int world = group.size();
  // At least one element: every rank sends the same count, never none.
  const int64_t width = std::max<int64_t>(1, *std::max_element(numels.begin(), numels.end()));
  const Device device = group.collective_device();
  Tensor send = zeros({width}, {local.dtype(), device});
  send.narrow(0, 0, local.numel()).copy_(local.detach().reshape({local.numel()}));
  std::vector<Tensor> parts;
  if (to_all) {
    Tensor all = Tensor::empty({world * width}, {local.dtype(), device});
    group.all_gather_into_tensor(all, send)->wait();
    all = all.cpu();
    for (int r = 0; r < world; ++r) parts.push_back(all.narrow(0, r * width, width));
  } else {
    if (group.rank() == 0)
      for (int r = 0; r < world; ++r) parts.push_back(Tensor::empty({width}, {local.dtype(), device}));
    group.gather(parts, send, 0)->wait();
    if (group.rank() != 0) return Tensor();
    for (Tensor& part : parts) part = part.cpu();
  }
  Tensor full = zeros({shape_numel(shape)}, local.dtype());
  for (int r = 0; r < world; ++r) full.narrow(0, offsets[r], numels[r]).copy_(parts[r].narrow(0, 0, numels[r]));
  return full.view(shape);
}

Tensor host_copy(const Tensor& t) {
  Tensor d = t.detach();
  return d.device() == kCPU ? d.clone() : d.cpu();
}

}  // namespace

TensorDict full_state_dict(FullyShardedDataParallel& fsdp, bool rank0_only) {
  const char* op = "full_state_dict";
  NoGradGuard no_grad;
  ProcessGroup& group = fsdp.group();
  const std::vector<ParamShard> shards = detail::holding_of(fsdp).params;
  for (const ParamShard& s : shards) detail::check_between_steps(s, op);
  const Layout layout = gather_layout(group, shards);
  const bool keep = !rank0_only || group.rank() == 0;
  std::unordered_map<const TensorImpl*, Tensor> full_of;
  for (size_t i = 0; i < shards.size(); ++i) {
    Tensor full =
        gather_full(group, layout.offsets[i], layout.numels[i], shards[i].param, shards[i].global_shape, !rank0_only);
    if (keep) full_of.emplace(shards[i].param.impl(), full);
  }
  if (!keep) return {};
  nn::Module& module = fsdp.module();
  const TensorDict buffers = module.named_buffers();
  TensorDict out;
  for (const auto& [key, value] : module.state_dict()) {
    if (buffers.contains(key)) {
      out.insert(key, host_copy(value));
    } else {
      // get_parameter gives the registered handle, the same for both names of a tied parameter.
      out.insert(key, full_of.at(module.get_parameter(key).impl()));
    }
  }
  return out;
}

TensorDict full_optimizer_state_dict(FullyShardedDataParallel& fsdp, const optim::Optimizer& optimizer,
                                     bool rank0_only) {
  const char* op = "full_optimizer_state_dict";
  NoGradGuard no_grad;
  ProcessGroup& group = fsdp.group();
  const detail::Holding h = detail::holding_of(fsdp);
  for (const ParamShard& s : h.params) detail::check_between_steps(s, op);
  const std::vector<detail::OptimizerParam> params = detail::optimizer_params(optimizer, h, op);
  const std::set<std::string> scalars = detail::scalar_entries(optimizer, params);
  const Layout layout = gather_layout(group, h.params);

  // Every rank must gather the same entries: compare how many each holds.
  if (!params.empty()) {
    Tensor counts = Tensor::empty({static_cast<int64_t>(params.size())}, DType::Int64);
    for (size_t i = 0; i < params.size(); ++i)
      counts.data<int64_t>()[i] = static_cast<int64_t>(optimizer.state(params[i].shard->param).size());
    const Device device = group.collective_device();
    Tensor low = counts.to(device).clone(), high = counts.to(device).clone();
    group.all_reduce(low, ReduceOp::Min)->wait();
    group.all_reduce(high, ReduceOp::Max)->wait();
    low = low.cpu();
    high = high.cpu();
    for (size_t i = 0; i < params.size(); ++i) {
      KILN_CHECK(low.data<int64_t>()[i] == high.data<int64_t>()[i], op, ": parameter '", params[i].shard->name,
                 "' has ", low.data<int64_t>()[i], " state entries on some rank and ", high.data<int64_t>()[i],
                 " on another; call it after the same steps on every rank");
    }
  }

  const bool keep = !rank0_only || group.rank() == 0;
  TensorDict out;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamShard& s = *params[i].shard;
    const size_t position = static_cast<size_t>(&s - h.params.data());
    for (const auto& [entry, value] : optimizer.state(s.param)) {
      const std::string key = "state." + std::to_string(i) + "." + entry;
      if (detail::is_per_element(entry, value, s, scalars, op)) {
        Tensor full =
            gather_full(group, layout.offsets[position], layout.numels[position], value, s.global_shape, !rank0_only);
        if (keep) out.insert(key, full);
      } else if (keep) {
        out.insert(key, host_copy(value));
      }
    }
  }
  if (!keep) return {};
  for (const auto& [key, value] : optimizer.state_dict())
    if (key.starts_with("param_groups.")) out.insert(key, value);
  return out;
}

}  // namespace kiln::distributed::fsdp
