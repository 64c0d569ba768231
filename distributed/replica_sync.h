// What every data-parallel wrapper (DDP, FSDP, ZeRO) does to its replicas
// when it is built: check that every rank holds the same parameters, make
// their values rank 0's, and claim the reduction of their gradients.
#pragma once

#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::distributed {

// Collective: throws on every rank, naming `who` ("DistributedDataParallel"),
// the first parameter that differs and the ranks, unless every rank of
// `group` has as many parameters, of the same dtypes and shapes, in the same
// order.
void check_same_parameters_on_every_rank(ProcessGroup& group, const TensorDict& named, const std::string& who);

// Collective: copies rank 0's values into every rank's `tensors` (one
// broadcast per dtype and device, of all of them packed into one buffer).
void broadcast_from_rank0(ProcessGroup& group, const std::vector<Tensor>& tensors);

// Which wrapper reduces each parameter's gradient. DistributedDataParallel,
// ZeroRedundancyOptimizer at stage 2 and FullyShardedDataParallel each
// reduce gradients from their own hooks, so a parameter under two of them
// would have its gradient averaged twice (or, under ZeRO's stage 2 and DDP,
// reduced to an owner and then all-reduced with the others' zeros): each
// holds a claim on its parameters while it lives, and a second claim throws
// naming both wrappers and the parameter. Local, no communication: every
// rank makes the same claims in the same program.
class GradientReductionClaim {
 public:
  // Throws kiln::Error if another live claim holds one of `params` (named
  // as in `named`); claims none of them then.
  GradientReductionClaim(const TensorDict& named, std::string who);
  ~GradientReductionClaim();
  GradientReductionClaim(const GradientReductionClaim&) = delete;
  GradientReductionClaim& operator=(const GradientReductionClaim&) = delete;

 private:
  std::vector<const TensorImpl*> claimed_;
};

}  // namespace kiln::distributed
