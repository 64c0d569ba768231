#include "distributed/ddp/distributed_data_parallel.h"

#include <map>
#include <tuple>

#include "autograd/grad_mode.h"
#include "distributed/init.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::distributed {

namespace {

// A parameter's dtype and shape as numbers every rank can compare:
// (dtype, ndim, size 0, ..., size 7) with dimensions past the eighth folded
// into the last.
constexpr int64_t kDescriptorLength = 10;

std::vector<int64_t> describe(const Tensor& t) {
  std::vector<int64_t> d(kDescriptorLength, 0);
  d[0] = static_cast<int64_t>(t.dtype());
  d[1] = t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) {
    const int64_t slot = std::min<int64_t>(i, kDescriptorLength - 3);
    d[2 + slot] = (i > slot ? d[2 + slot] : 1) * t.shape()[i];
  }
  return d;
}

std::string describe_text(const std::vector<int64_t>& d) {
  std::string text = std::string(dtype_name(static_cast<DType>(d[0]))) + " [";
  for (int64_t i = 0; i < std::min<int64_t>(d[1], kDescriptorLength - 2); ++i) {
    text += (i ? ", " : "") + std::to_string(d[2 + i]);
  }
  return text + "]";
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options)
    : module_(std::move(module)), group_(options.group), options_(options) {
  KILN_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  if (!group_) group_ = default_group_ptr();
  register_module("module", module_);
  check_same_parameters_on_every_rank();
  // Every replica starts from rank 0's state.
  std::vector<Tensor> state = module_->parameters();
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  broadcast_from_rank0(state);

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

void DistributedDataParallel::check_same_parameters_on_every_rank() {
  const TensorDict named = module_->named_parameters();
  const int size = group_->size();
  // First the counts: the descriptors below must have one length everywhere.
  const Device where = group_->collective_device();  // the CPU, or NCCL's GPU
  Tensor count = full({1}, static_cast<double>(named.size()), {DType::Int64, where});
  Tensor counts = empty({size}, {DType::Int64, where});
  group_->all_gather_into_tensor(counts, count)->wait();
  counts = counts.cpu();
  for (int r = 0; r < size; ++r) {
    KILN_CHECK(counts.at<int64_t>({r}) == static_cast<int64_t>(named.size()), "DistributedDataParallel: rank ",
               group_->rank(), " has ", named.size(), " parameters but rank ", r, " has ", counts.at<int64_t>({r}),
               "; every rank must wrap the same model");
  }
  const int64_t n = static_cast<int64_t>(named.size());
  // mine: (n, kDescriptorLength); all: (size, n, kDescriptorLength)
  std::vector<int64_t> values;
  std::vector<std::string> names;
  for (const auto& [name, p] : named) {
    const auto d = describe(p);
    values.insert(values.end(), d.begin(), d.end());
    names.push_back(name);
  }
  Tensor mine = from_vector<int64_t>(values, {n, kDescriptorLength});
  Tensor all = empty({size, n, kDescriptorLength}, {DType::Int64, where});
  if (n > 0) group_->all_gather_into_tensor(all, mine.to(where))->wait();
  all = all.cpu();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> here(kDescriptorLength);
    for (int64_t j = 0; j < kDescriptorLength; ++j) here[j] = mine.at<int64_t>({i, j});
    for (int r = 0; r < size; ++r) {
      std::vector<int64_t> there(kDescriptorLength);
      for (int64_t j = 0; j < kDescriptorLength; ++j) there[j] = all.at<int64_t>({r, i, j});
      KILN_CHECK(here == there, "DistributedDataParallel: parameter ", i, " ('", names[i], "') is ",
                 describe_text(here), " on rank ", group_->rank(), " but ", describe_text(there), " on rank ", r,
                 "; every rank must wrap the same model");
    }
  }
}

void DistributedDataParallel::broadcast_from_rank0(const std::vector<Tensor>& tensors) {
  if (group_->size() == 1 || tensors.empty()) return;
  // One broadcast per dtype and device, of all those tensors packed into
  // one flat buffer: a model has dozens of small tensors.
  NoGradGuard no_grad;
  std::map<std::tuple<DType, std::string>, std::vector<Tensor>> groups;
  for (const Tensor& t : tensors) groups[{t.dtype(), t.device().str()}].push_back(t);
  for (auto& [key, members] : groups) {
    int64_t numel = 0;
    for (const Tensor& t : members) numel += t.numel();
    // flat: (numel) every member's values one after another.
    Tensor flat = empty({numel}, TensorOptions(members[0].dtype(), members[0].device()));
    int64_t offset = 0;
    for (const Tensor& t : members) {
      flat.narrow(0, offset, t.numel()).view(t.shape()).copy_(t);
      offset += t.numel();
    }
    group_->broadcast(flat, 0)->wait();
    offset = 0;
    for (const Tensor& t : members) {
      Tensor(t).copy_(flat.narrow(0, offset, t.numel()).view(t.shape()));
      offset += t.numel();
    }
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  nn::TensorList outputs = forward_many({input});
  KILN_CHECK(outputs.size() == 1, "DistributedDataParallel: ", module_->name(), " returned ", outputs.size(),
             " tensors; call the DDP module with a TensorList to receive them all");
  return std::move(outputs[0]);
}

nn::TensorList DistributedDataParallel::forward_many(const nn::TensorList& inputs) {
  const bool training = is_training() && GradMode::is_enabled();
  if (training && options_.broadcast_buffers) broadcast_from_rank0(module_->buffers());
  // Through operator(), so that the wrapped module's hooks run as they do
  // without DDP (an FSDP-style gather in a pre-hook, a profiler's timing).
  nn::TensorList outputs = (*module_)(inputs);
  if (training && sync_) {
    // The search for unused parameters starts from one output.
    KILN_CHECK(!options_.find_unused_parameters || outputs.size() == 1,
               "DistributedDataParallel: find_unused_parameters needs a module of one output, but ", module_->name(),
               " returned ", outputs.size());
    reducer_->prepare_for_backward(outputs.empty() ? Tensor() : outputs[0]);
  }
  return outputs;
}

}  // namespace kiln::distributed
