#include "distributed/ddp/distributed_data_parallel.h"

#include <map>
#include <tuple>

#include "autograd/grad_mode.h"
#include "distributed/init.h"
#include "distributed/replica_sync.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::distributed {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options)
    : module_(std::move(module)), group_(options.group), options_(options) {
  KILN_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  if (!group_) group_ = default_group_ptr();
  register_module("module", module_);
  claim_ = std::make_unique<GradientReductionClaim>(module_->named_parameters(), "DistributedDataParallel");
  check_same_parameters_on_every_rank(*group_, module_->named_parameters(), "DistributedDataParallel");
  // Every replica starts from rank 0's state.
  std::vector<Tensor> state = module_->parameters();
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  broadcast_from_rank0(*group_, state);

  std::vector<Tensor> parameters;
  std::vector<std::string> names;
  for (const auto& [name, p] : module_->named_parameters()) {
    parameters.push_back(p);
    names.push_back(name);
  }
  ReducerOptions reducer_options;
  reducer_options.first_bucket_bytes = options.first_bucket_cap_bytes;
  reducer_options.bucket_bytes = options.bucket_cap_bytes;
  reducer_options.find_unused_parameters = options.find_unused_parameters;
  reducer_ = std::make_unique<Reducer>(std::move(parameters), std::move(names), group_, options.comm_hook,
                                       reducer_options);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  nn::TensorList outputs = forward_many({input});
  KILN_CHECK(outputs.size() == 1, "DistributedDataParallel: ", module_->name(), " returned ", outputs.size(),
             " tensors; call the DDP module with a TensorList to receive them all");
  return std::move(outputs[0]);
}

nn::TensorList DistributedDataParallel::forward_many(const nn::TensorList& inputs) {
  const bool training = is_training() && GradMode::is_enabled();
  if (training && options_.broadcast_buffers) broadcast_from_rank0(*group_, module_->buffers());
  // Through operator(), so that the wrapped module's hooks run as they do
  // without DDP (an FSDP-style gather in a pre-hook, a profiler's timing).
  nn::TensorList outputs = (*module_)(inputs);
  if (training && sync_) prepare_for_backward(outputs);
  return outputs;
}

void DistributedDataParallel::prepare_for_backward(const nn::TensorList& outputs) {
  // The search for unused parameters starts from one output.
  KILN_CHECK(!options_.find_unused_parameters || outputs.size() == 1,
             "DistributedDataParallel: find_unused_parameters needs a module of one output, but ", module_->name(),
             " returned ", outputs.size());
  reducer_->prepare_for_backward(outputs.empty() ? Tensor() : outputs[0]);
}

}  // namespace kiln::distributed
