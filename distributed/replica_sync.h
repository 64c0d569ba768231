// What every data-parallel wrapper (DDP, FSDP, ZeRO) does to its replicas
// when it is built: check that every rank holds the same parameters, then
// make their values rank 0's.
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

}  // namespace kiln::distributed
