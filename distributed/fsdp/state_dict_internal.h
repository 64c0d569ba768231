// What state_dict.cpp (sharded checkpoints) and full_state_dict.cpp
// (gathered state dicts) share: how this process holds a model, and how an
// optimizer's state entries are told apart. Not part of the public API.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "distributed/fsdp/fully_sharded_data_parallel.h"
#include "optim/optimizer.h"

namespace kiln::distributed::fsdp::detail {

// Every parameter as this process holds it, the persistent buffers (whole
// on every rank), and the group (null for one process).
struct Holding {
  std::vector<ParamShard> params;
  std::vector<std::pair<std::string, Tensor>> buffers;
  ProcessGroup* group = nullptr;
  int rank() const { return group != nullptr ? group->rank() : 0; }
};

// Under FSDP: parameter_shards(), with the offset of an empty part moved
// inside its parameter. A plain module: every parameter whole (offset 0,
// local_numel = numel, a writer).
Holding holding_of(FullyShardedDataParallel& fsdp);
Holding holding_of(nn::Module& module);

// The buffers state_dict() saves, by name, in named_buffers() order.
std::vector<std::pair<std::string, Tensor>> persistent_buffers(const nn::Module& module);

// Throws unless the parameter holds just its shard (not gathered).
void check_between_steps(const ParamShard& s, const char* op);

// One of the optimizer's parameters: its group and its shard.
struct OptimizerParam {
  size_t group = 0;
  const ParamShard* shard = nullptr;
};
// The optimizer's parameters in its numbering (group by group), each found
// in `h`; throws naming one that is not the module's.
std::vector<OptimizerParam> optimizer_params(const optim::Optimizer& optimizer, const Holding& h, const char* op);

// The state entries that hold one number rather than one per element
// (Adam's step): those that are 0-dim where their parameter is not.
std::set<std::string> scalar_entries(const optim::Optimizer& optimizer, const std::vector<OptimizerParam>& params);
// Whether `value`, entry `entry` of the state of `s`, has one element per
// parameter element; throws if it is neither that nor a single number.
bool is_per_element(const std::string& entry, const Tensor& value, const ParamShard& s,
                    const std::set<std::string>& scalars, const char* op);

}  // namespace kiln::distributed::fsdp::detail
