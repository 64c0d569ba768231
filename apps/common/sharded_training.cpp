#include "apps/common/sharded_training.h"

#include <unordered_map>

#include "apps/common/interrupt.h"
#include "distributed/fsdp/state_dict.h"
#include "distributed/memory_report.h"
#include "optim/training_checkpoint.h"
#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/cuda_status.h"

namespace kiln::apps {

namespace fsdp = distributed::fsdp;

void check_fsdp_flags(bool fsdp, const std::string& strategy, bool amp, const std::string& device) {
  fsdp::ShardingStrategy parsed = fsdp::ShardingStrategy::FullShard;
  try {
    parsed = fsdp::parse_sharding_strategy(strategy);
  } catch (const Error& e) {
    KILN_FAIL("--fsdp-strategy: ", e.message());
  }
  KILN_CHECK(fsdp || parsed == fsdp::ShardingStrategy::FullShard, "--fsdp-strategy ", strategy,
             " only goes with --fsdp");
  KILN_CHECK(!(fsdp && amp && Device(device).is_cuda()), "--fsdp with --amp on ", device,
             " is not supported: float16 loss scaling would need every rank to agree on the steps it skips, and "
             "each rank sees only its own gradient shards; use --amp on the CPU (bfloat16) or drop --amp");
}

void shard_optimizer_state(fsdp::FullyShardedDataParallel& fsdp, optim::Optimizer& optimizer) {
  const std::vector<fsdp::ParamShard> shards = fsdp.parameter_shards();
  std::unordered_map<const TensorImpl*, const fsdp::ParamShard*> shard_of;
  for (const fsdp::ParamShard& s : shards) shard_of[s.param.impl()] = &s;
  // Note [Optimizer state dict]: parameter i's entries are "state.<i>.<name>",
  // the parameters numbered group after group.
  TensorDict dict;
  bool any_state = false;
  int64_t index = 0;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    for (const Tensor& param : optimizer.params(g)) {
      const auto found = shard_of.find(param.impl());
      KILN_CHECK(found != shard_of.end(), "shard_optimizer_state: parameter ", index, " of ", optimizer.name(),
                 " (group ", g, ") is not a parameter of the FSDP-wrapped module");
      const fsdp::ParamShard& s = *found->second;
      for (const auto& [name, value] : optimizer.state(param)) {
        any_state = true;
        KILN_CHECK(!s.global_shape.empty(), "shard_optimizer_state: parameter '", s.name,
                   "' is 0-dim; its per-element state cannot be told from a single number");
        Tensor local = value;
        if (value.shape() == s.global_shape) {
          // The flattened parameter's elements [offset, offset + local_numel).
          // On the shard's device: the host under cpu_offload.
          local = value.contiguous().reshape({value.numel()}).narrow(0, s.offset, s.local_numel).to(s.param.device()).clone();
        }
        dict.insert("state." + std::to_string(index) + "." + name, local);
      }
      ++index;
    }
  }
  if (!any_state) return;
  for (const auto& [key, value] : optimizer.state_dict()) {
    if (key.starts_with("param_groups.")) dict.insert(key, value);
  }
  optimizer.load_state_dict(dict);
}

void save_gathered_training_checkpoint(const std::string& path, fsdp::FullyShardedDataParallel& fsdp,
                                       const optim::Optimizer& optimizer, optim::LRScheduler* scheduler, int64_t step,
                                       const std::map<std::string, std::string>& extra,
                                       optim::GradScaler* grad_scaler) {
  const TensorDict model = fsdp::full_state_dict(fsdp, /*rank0_only=*/true);
  const TensorDict state = fsdp::full_optimizer_state_dict(fsdp, optimizer, /*rank0_only=*/true);
  if (fsdp.group().rank() != 0) return;
  SavingCheckpoint saving(path);
  optim::save_training_checkpoint(path, optim::TrainingStateDicts{.model = model,
                                                                  .optimizer = state,
                                                                  .optimizer_name = optimizer.name(),
                                                                  .scheduler = scheduler,
                                                                  .step = step,
                                                                  .extra = extra,
                                                                  .grad_scaler = grad_scaler});
}

void load_gathered_state(fsdp::FullyShardedDataParallel& fsdp, nn::Module& plain) {
  plain.load_state_dict(fsdp::full_state_dict(fsdp, /*rank0_only=*/false));
}

void print_memory_line(std::ostream& out, int rank, const std::string& when, const nn::Module& module,
                       const optim::Optimizer* optimizer, Device device) {
  out << "rank " << rank << " memory " << when << ": " << distributed::memory_report(module, optimizer, device).str()
      << "\n"
      << std::flush;
}

void reset_peak_memory(Device device) {
  if (device.is_cuda()) {
    cuda::reset_peak_memory_stats(device);
    return;
  }
  if (device.is_cpu()) cpu_reset_peak_allocated_bytes();
}

}  // namespace kiln::apps
