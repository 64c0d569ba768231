#include "distributed/replica_sync.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <tuple>

#include "autograd/grad_mode.h"
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

void check_same_parameters_on_every_rank(ProcessGroup& group, const TensorDict& named, const std::string& who) {
  const int size = group.size();
  // First the counts: the descriptors below must have one length everywhere.
  const Device where = group.collective_device();  // the CPU, or NCCL's GPU
  Tensor count = full({1}, static_cast<double>(named.size()), {DType::Int64, where});
  Tensor counts = empty({size}, {DType::Int64, where});
  group.all_gather_into_tensor(counts, count)->wait();
  counts = counts.cpu();
  for (int r = 0; r < size; ++r) {
    KILN_CHECK(counts.at<int64_t>({r}) == static_cast<int64_t>(named.size()), who, ": rank ",
               group.rank(), " has ", named.size(), " parameters but rank ", r, " has ", counts.at<int64_t>({r}),
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
  if (n > 0) group.all_gather_into_tensor(all, mine.to(where))->wait();
  all = all.cpu();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> here(kDescriptorLength);
    for (int64_t j = 0; j < kDescriptorLength; ++j) here[j] = mine.at<int64_t>({i, j});
    for (int r = 0; r < size; ++r) {
      std::vector<int64_t> there(kDescriptorLength);
      for (int64_t j = 0; j < kDescriptorLength; ++j) there[j] = all.at<int64_t>({r, i, j});
      KILN_CHECK(here == there, who, ": parameter ", i, " ('", names[i], "') is ",
                 describe_text(here), " on rank ", group.rank(), " but ", describe_text(there), " on rank ", r,
                 "; every rank must wrap the same model");
    }
  }
}

void broadcast_from_rank0(ProcessGroup& group, const std::vector<Tensor>& tensors) {
  if (group.size() == 1 || tensors.empty()) return;
  // One broadcast per dtype and device, of all those tensors packed into
  // one flat buffer: a model has dozens of small tensors.
  NoGradGuard no_grad;
  std::map<std::tuple<DType, std::string>, std::vector<Tensor>> groups;
  for (const Tensor& t : tensors) groups[{t.dtype(), t.device().str()}].push_back(t);
  for (auto& [key, members] : groups) {
    int64_t numel = 0;
    for (const Tensor& t : members) numel += t.numel();
    // flat: (numel) every member's values one after another, where the
    // backend can send it (NCCL: the GPU, for a model FSDP offloads to the host).
    const Device where = members[0].device().is_cpu() ? group.collective_device() : members[0].device();
    Tensor flat = empty({numel}, TensorOptions(members[0].dtype(), where));
    int64_t offset = 0;
    for (const Tensor& t : members) {
      flat.narrow(0, offset, t.numel()).view(t.shape()).copy_(t);
      offset += t.numel();
    }
    group.broadcast(flat, 0)->wait();
    offset = 0;
    for (const Tensor& t : members) {
      Tensor(t).copy_(flat.narrow(0, offset, t.numel()).view(t.shape()));
      offset += t.numel();
    }
  }
}

namespace {

// The live claims: parameter -> the wrapper reducing its gradient.
std::mutex& claims_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::unordered_map<const TensorImpl*, std::string>& claims() {
  static auto* table = new std::unordered_map<const TensorImpl*, std::string>;  // never destroyed: see allocator.cpp
  return *table;
}

}  // namespace

GradientReductionClaim::GradientReductionClaim(const TensorDict& named, std::string who) {
  std::lock_guard<std::mutex> lock(claims_mutex());
  auto& table = claims();
  for (const auto& [name, p] : named) {
    auto it = table.find(p.impl());
    KILN_CHECK(it == table.end(), who, ": parameter '", name, "' already has its gradient reduced by ", it->second,
               "; one gradient reduced by both would be averaged twice (ZeroRedundancyOptimizer goes with DDP at "
               "stage 1 only, and FullyShardedDataParallel reduces its own gradients: wrap the model in one of them)");
  }
  for (const auto& [name, p] : named) {
    if (table.emplace(p.impl(), who).second) claimed_.push_back(p.impl());
  }
}

GradientReductionClaim::~GradientReductionClaim() {
  std::lock_guard<std::mutex> lock(claims_mutex());
  for (const TensorImpl* p : claimed_) claims().erase(p);
}

}  // namespace kiln::distributed
