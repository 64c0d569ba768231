// SyncBatchNorm's synchronised forward and backward, and
// convert_sync_batchnorm (Note [SyncBatchNorm statistics] and Note
// [SyncBatchNorm gradients and DDP] in sync_batch_norm.h).
#include "distributed/ddp/sync_batch_norm.h"

#include <any>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/custom_function.h"
#include "distributed/init.h"
#include "nn/container.h"
#include "tensor/ops.h"

namespace kiln::distributed {

using autograd::AutogradContext;
using autograd::TensorList;

namespace {

// Statistics are kept in float32 for a 16-bit input, else in the input's
// dtype, as nn::BatchNorm keeps them (Note [Normalization statistics]).
DType stats_dtype(DType dtype) { return dtype == DType::Float16 || dtype == DType::BFloat16 ? DType::Float32 : dtype; }

// x: (N, C, *) -> (N, C, S) contiguous in `dtype`, S the product of the dims after C.
Tensor batch_view(const Tensor& x, DType dtype) {
  int64_t spatial = 1;
  for (int64_t d = 2; d < x.dim(); ++d) spatial *= x.size(d);
  return x.to(dtype).contiguous().view({x.size(0), x.size(1), spatial});
}

struct GroupStats {
  Tensor mean;          // (C), stats dtype
  Tensor var;           // (C), biased: what the batch is normalised with
  Tensor unbiased_var;  // (C): what running_var is updated with
  double count = 0;     // values per channel over the whole group
};

// The statistics of the batch made of every rank's x; collective over `group`
// (Note [SyncBatchNorm statistics]).
GroupStats group_batch_stats(const Tensor& x, ProcessGroup& group) {
  const int64_t channels = x.size(1);
  const DType stat = stats_dtype(x.dtype());
  Tensor xv = batch_view(x, stat);  // (N, C, S)
  const int64_t count = xv.size(0) * xv.size(2);

  // This rank's summary [mean (C) | M2 (C) | count (1)], all zeros for an
  // empty shard; float64, on x's device, where the backend (NCCL) wants it.
  const TensorOptions summary_options{DType::Float64, x.device()};
  Tensor summary = zeros({2 * channels + 1}, summary_options);
  if (count > 0) {
    Tensor mean = ops::mean(xv, {0, 2}, /*keepdim=*/true);         // (1, C, 1)
    Tensor deviation = ops::sub(xv, mean);                         // (N, C, S)
    Tensor m2 = ops::sum(ops::mul(deviation, deviation), {0, 2});  // (C)
    summary = ops::cat({mean.view({channels}).to(DType::Float64), m2.to(DType::Float64),
                        full({1}, static_cast<double>(count), summary_options)});
  }
  Tensor summaries = empty({group.size(), 2 * channels + 1}, summary_options);  // (W, 2C + 1)
  group.all_gather_into_tensor(summaries, summary)->wait();

  Tensor means = summaries.narrow(1, 0, channels);       // (W, C)
  Tensor m2s = summaries.narrow(1, channels, channels);  // (W, C)
  Tensor counts = summaries.narrow(1, 2 * channels, 1);  // (W, 1)
  const double total = ops::sum(counts).item<double>();
  // Every rank sees the same total, so all of them throw together.
  KILN_CHECK(total > 1, "SyncBatchNorm: expected more than 1 value per channel when training, got ", total,
             " over the ", group.size(), " ranks of group '", group.name(), "' (this rank's input has shape ",
             x.shape(), ")");
  Tensor mean = ops::div(ops::sum(ops::mul(counts, means), {0}), total);                 // (C)
  Tensor spread = ops::sub(means, mean);                                                 // (W, C)
  Tensor m2 = ops::sum(ops::add(m2s, ops::mul(counts, ops::mul(spread, spread))), {0});  // (C)
  return {mean.to(stat), ops::div(m2, total).to(stat), ops::div(m2, total - 1).to(stat), total};
}

// nn::BatchNorm's update (tensor/norm.h), with the group's statistics.
void update_running_stats(const Tensor& running_mean, const Tensor& running_var, const GroupStats& stats,
                          double momentum) {
  const DType stat = stats.mean.dtype();
  // The handles are copies; copy_ writes the module's buffers in place.
  Tensor mean_out = running_mean, var_out = running_var;
  mean_out.copy_(ops::add(ops::mul(running_mean.to(stat), 1 - momentum), stats.mean, momentum));
  var_out.copy_(ops::add(ops::mul(running_var.to(stat), 1 - momentum), stats.unbiased_var, momentum));
}

// A training forward synchronised over `group`. Arguments after ctx:
// x (N, C, *); weight, bias (C) or undefined; running_mean, running_var (C)
// or undefined, updated in place; momentum; eps; group. First-order only:
// the all_reduce in backward is not itself recorded.
struct SyncBatchNormFunction : autograd::Function<SyncBatchNormFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                        const std::shared_ptr<ProcessGroup>& group) {
    GroupStats stats = group_batch_stats(x, *group);
    if (running_mean.defined()) update_running_stats(running_mean, running_var, stats, momentum);
    // Normalising with statistics given from outside is batch_norm's eval
    // mode: (x - mean) * rsqrt(var + eps) * weight + bias.
    Tensor out = ops::batch_norm(x, weight, bias, stats.mean, stats.var, /*training=*/false, 0.0, eps).output;
    Tensor invstd = ops::rsqrt(ops::add(stats.var, eps));  // (C)
    ctx->save_for_backward({x, weight, stats.mean, invstd});
    ctx->saved_data["count"] = stats.count;
    ctx->saved_data["group"] = group;
    return out;
  }

  static TensorList backward(AutogradContext* ctx, const TensorList& grads) {
    const TensorList saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const DType stat = mean.dtype();
    const int64_t channels = x.size(1);
    const Shape per_channel{1, channels, 1};  // broadcasts a (C) tensor against (N, C, S)
    Tensor xv = batch_view(x, stat);          // (N, C, S)
    Tensor dy = batch_view(grads[0], stat);   // (N, C, S)
    Tensor xhat = ops::mul(ops::sub(xv, mean.view(per_channel)), invstd.view(per_channel));  // (N, C, S)
    // Over this rank's rows only (Note [SyncBatchNorm gradients and DDP]).
    Tensor sum_dy = ops::sum(dy, {0, 2});                       // (C)
    Tensor sum_dy_xhat = ops::sum(ops::mul(dy, xhat), {0, 2});  // (C)

    Tensor grad_input;
    if (ctx->needs_input_grad(0)) {
      // The statistics depend on every rank's rows, so grad_input needs both
      // sums over the whole group's batch. Collective: replicas of one model
      // all need (or all skip) the input's gradient.
      Tensor sums = ops::cat({sum_dy, sum_dy_xhat}).to(DType::Float64);  // (2C)
      std::any_cast<std::shared_ptr<ProcessGroup>>(ctx->saved_data["group"])->all_reduce(sums)->wait();
      const double count = std::any_cast<double>(ctx->saved_data["count"]);
      Tensor mean_dy = ops::div(sums.narrow(0, 0, channels), count).to(stat);              // (C)
      Tensor mean_dy_xhat = ops::div(sums.narrow(0, channels, channels), count).to(stat);  // (C)
      Tensor scale = weight.defined() ? ops::mul(invstd, weight.to(stat)) : invstd;        // (C)
      // w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), means over the group's batch.
      Tensor centred =
          ops::sub(ops::sub(dy, mean_dy.view(per_channel)), ops::mul(xhat, mean_dy_xhat.view(per_channel)));
      grad_input = ops::mul(centred, scale.view(per_channel)).to(x.dtype()).view(x.shape());
    }
    // nn::BatchNorm gives parameter gradients the weight's dtype.
    const DType param_dtype = weight.defined() ? weight.dtype() : x.dtype();
    Tensor grad_weight = ctx->needs_input_grad(1) ? sum_dy_xhat.to(param_dtype) : Tensor();
    Tensor grad_bias = ctx->needs_input_grad(2) ? sum_dy.to(param_dtype) : Tensor();
    // One per forward argument: x, weight, bias, running_mean, running_var, momentum, eps, group.
    return {grad_input, grad_weight, grad_bias, Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

// ---- SyncBatchNorm ----

namespace {

// Checked before BatchNorm's constructor runs, so that the error names
// SyncBatchNorm.
int64_t checked_num_features(int64_t num_features) {
  KILN_CHECK(num_features > 0, "SyncBatchNorm: num_features must be positive, got ", num_features);
  return num_features;
}

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                             bool track_running_stats, std::shared_ptr<ProcessGroup> group)
    : BatchNorm(checked_num_features(num_features), eps, momentum, affine, track_running_stats),
      group_(std::move(group)) {}

SyncBatchNorm::SyncBatchNorm(const nn::BatchNorm& batch_norm, std::shared_ptr<ProcessGroup> group)
    : BatchNorm(TakeOver{batch_norm}), group_(std::move(group)) {}

void SyncBatchNorm::check_input_dim(const Tensor& input) const {
  KILN_CHECK(input.dim() >= 2, name(), ": expected an input of at least 2 dims (N, C, *), got ", input.dim(),
             "D input of shape ", input.shape());
}

std::shared_ptr<ProcessGroup> SyncBatchNorm::sync_group() const {
  if (!is_training()) return nullptr;
  std::shared_ptr<ProcessGroup> group = group_;
  if (!group && is_initialized()) group = default_group_ptr();
  if (!group || group->size() == 1) return nullptr;
  return group;
}

Tensor SyncBatchNorm::forward(const Tensor& input) {
  const double factor = begin_forward(input);
  std::shared_ptr<ProcessGroup> group = sync_group();
  if (!group) return normalize(input, factor);
  return SyncBatchNormFunction::apply(input, weight, bias, running_mean, running_var, factor, eps, group);
}

// ---- convert_sync_batchnorm ----

namespace {

std::string join_path(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

class SyncBatchNormConversion {
 public:
  explicit SyncBatchNormConversion(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}

  // `module` (at `path` in the tree) with its BatchNorms replaced; a module
  // reached twice is converted once.
  std::shared_ptr<nn::Module> convert(const std::shared_ptr<nn::Module>& module, const std::string& path) {
    auto done = converted_.find(module.get());
    if (done != converted_.end()) return done->second;
    std::shared_ptr<nn::Module> result = convert_new(module, path);
    converted_[module.get()] = result;
    return result;
  }

 private:
  std::shared_ptr<nn::Module> convert_new(const std::shared_ptr<nn::Module>& module, const std::string& path) {
    // A SyncBatchNorm is a BatchNorm too; it stays as it is.
    if (std::dynamic_pointer_cast<SyncBatchNorm>(module)) return module;
    if (auto batch_norm = std::dynamic_pointer_cast<nn::BatchNorm>(module)) {
      auto sync = std::make_shared<SyncBatchNorm>(*batch_norm, group_);
      retire(*batch_norm, path);
      return sync;
    }
    // nn's containers run their own lists, which replace_module does not
    // reach: rebuild them. Exact types only: a subclass may hold more state.
    const std::type_info& type = typeid(*module);
    if (type == typeid(nn::Sequential)) return rebuilt_sequential(module, path);
    if (type == typeid(nn::ModuleList)) return rebuilt_list(module, path);
    if (type == typeid(nn::ModuleDict)) return rebuilt_dict(module, path);
    for (const auto& [name, child] : module->named_children()) {
      std::shared_ptr<nn::Module> converted = convert(child, join_path(path, name));
      if (converted != child) module->replace_module(name, converted);
    }
    return module;
  }

  // Makes a call that still reaches the replaced layer fail, naming it
  // (see convert_sync_batchnorm in the header).
  static void retire(nn::BatchNorm& batch_norm, const std::string& path) {
    const std::string where = path.empty() ? std::string("the module passed") : "'" + path + "'";
    batch_norm.register_forward_pre_hook([where, type = batch_norm.name()](nn::Module&, const Tensor&) {
      KILN_FAIL(type, " ", where, " was replaced by a SyncBatchNorm in convert_sync_batchnorm but is still being ",
                "called: its parent reaches it through a member handle or a list of its own; read the layer back "
                "from the converted module, e.g. with get_submodule");
    });
  }

  // Sequential's names: the first registration of each module comes from
  // named_children(), in order; a module listed again takes its position's
  // default name (named_children() lists a module once).
  std::shared_ptr<nn::Module> rebuilt_sequential(const std::shared_ptr<nn::Module>& module, const std::string& path) {
    const auto& sequential = static_cast<const nn::Sequential&>(*module);
    std::vector<nn::NamedModule> first = sequential.named_children();
    std::vector<nn::NamedModule> items;
    size_t next = 0;
    for (size_t i = 0; i < sequential.size(); ++i) {
      const std::shared_ptr<nn::Module>& item = sequential[static_cast<int64_t>(i)];
      const bool is_first = next < first.size() && first[next].second == item;
      items.emplace_back(is_first ? first[next++].first : std::to_string(i), item);
    }
    return rebuilt_if_changed<nn::Sequential>(
        module, items, path, [](nn::Sequential& out, const std::string& name, std::shared_ptr<nn::Module> m) {
          out.push_back(name, std::move(m));
        });
  }

  std::shared_ptr<nn::Module> rebuilt_list(const std::shared_ptr<nn::Module>& module, const std::string& path) {
    std::vector<nn::NamedModule> items;
    for (const auto& item : static_cast<const nn::ModuleList&>(*module)) {
      items.emplace_back(std::to_string(items.size()), item);
    }
    return rebuilt_if_changed<nn::ModuleList>(
        module, items, path,
        [](nn::ModuleList& out, const std::string&, std::shared_ptr<nn::Module> m) { out.push_back(std::move(m)); });
  }

  std::shared_ptr<nn::Module> rebuilt_dict(const std::shared_ptr<nn::Module>& module, const std::string& path) {
    const auto& dict = static_cast<const nn::ModuleDict&>(*module);
    std::vector<nn::NamedModule> items(dict.begin(), dict.end());
    return rebuilt_if_changed<nn::ModuleDict>(
        module, items, path, [](nn::ModuleDict& out, const std::string& name, std::shared_ptr<nn::Module> m) {
          out.insert(name, std::move(m));
        });
  }

  // A new Container holding `items` (`container`'s) converted, or
  // `container` itself when no item changed. `add` appends one item.
  template <class Container, class Add>
  std::shared_ptr<nn::Module> rebuilt_if_changed(const std::shared_ptr<nn::Module>& container,
                                                 const std::vector<nn::NamedModule>& items, const std::string& path,
                                                 Add add) {
    std::vector<nn::NamedModule> converted;
    bool changed = false;
    for (const auto& [name, item] : items) {
      converted.emplace_back(name, convert(item, join_path(path, name)));
      changed = changed || converted.back().second != item;
    }
    if (!changed) return container;
    auto out = std::make_shared<Container>();
    // Before the items go in: train() would also set theirs.
    out->train(container->is_training());
    for (auto& [name, item] : converted) add(*out, name, std::move(item));
    return out;
  }

  std::shared_ptr<ProcessGroup> group_;
  std::unordered_map<const nn::Module*, std::shared_ptr<nn::Module>> converted_;
};

}  // namespace

std::shared_ptr<nn::Module> convert_sync_batchnorm(const std::shared_ptr<nn::Module>& module,
                                                   std::shared_ptr<ProcessGroup> group) {
  KILN_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  return SyncBatchNormConversion(std::move(group)).convert(module, "");
}

}  // namespace kiln::distributed
