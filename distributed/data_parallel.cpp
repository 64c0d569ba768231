// DataParallel: Note [DataParallel steps] (data_parallel.h).
#include "distributed/data_parallel.h"

#include <exception>
#include <thread>

#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/error.h"

namespace kiln::distributed {

namespace {

// The calling thread's grad mode and autocast settings, to be put in force
// on a replica's thread (both are per thread).
struct ThreadSettings {
  bool grad_enabled = GradMode::is_enabled();
  bool cpu_autocast = autocast_enabled(DeviceType::CPU);
  DType cpu_dtype = autocast_dtype(DeviceType::CPU);
  bool cuda_autocast = autocast_enabled(DeviceType::CUDA);
  DType cuda_dtype = autocast_dtype(DeviceType::CUDA);
};

Tensor run_with(const ThreadSettings& s, nn::Module& replica, const Tensor& input) {
  AutoGradMode grad_mode(s.grad_enabled);
  AutocastGuard cpu(DeviceType::CPU, s.cpu_dtype, s.cpu_autocast);
  AutocastGuard cuda(DeviceType::CUDA, s.cuda_dtype, s.cuda_autocast);
  // forward_many, not operator(): the hooks of the wrapped module run once,
  // around the whole batch (Note [DataParallel steps]).
  nn::TensorList outputs = replica.forward_many({input});
  KILN_CHECK(outputs.size() == 1, "DataParallel: ", replica.name(), " returned ", outputs.size(),
             " tensors; DataParallel gathers one");
  return outputs[0];
}

std::vector<Tensor> tensors_of(const TensorDict& named) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, const ModuleFactory& make_replica,
                           std::vector<Device> devices)
    : module_(std::move(module)), devices_(std::move(devices)) {
  KILN_CHECK(module_ != nullptr, "DataParallel: the module is null");
  KILN_CHECK(!devices_.empty(), "DataParallel: the list of devices is empty");
  KILN_CHECK(devices_.size() == 1 || make_replica, "DataParallel: ", devices_.size(),
             " devices need a factory for the other replicas");
  register_module("module", module_);
  module_->to(devices_[0]);
  replicas_.push_back(module_);
  const TensorDict params = module_->named_parameters();
  const TensorDict buffers = module_->named_buffers();
  for (size_t r = 1; r < devices_.size(); ++r) {
    std::shared_ptr<nn::Module> replica = make_replica();
    KILN_CHECK(replica != nullptr, "DataParallel: the factory returned null for replica ", r);
    replica->to(devices_[r]);
    const TensorDict rp = replica->named_parameters(), rb = replica->named_buffers();
    KILN_CHECK(rp.keys() == params.keys() && rb.keys() == buffers.keys(), "DataParallel: replica ", r,
               " from the factory has parameters ", rp.keys(), " and buffers ", rb.keys(), " but the module has ",
               params.keys(), " and ", buffers.keys());
    for (const auto& [name, p] : params) {
      KILN_CHECK(rp.at(name).shape() == p.shape() && rp.at(name).dtype() == p.dtype(), "DataParallel: replica ", r,
                 "'s parameter '", name, "' is ", dtype_name(rp.at(name).dtype()), " ", rp.at(name).shape(),
                 ", the module's ", dtype_name(p.dtype()), " ", p.shape());
    }
    replicas_.push_back(std::move(replica));
  }
  for (const auto& replica : replicas_) {
    parameters_.push_back(tensors_of(replica->named_parameters()));
    buffers_.push_back(tensors_of(replica->named_buffers()));
  }
  hook_handles_.resize(replicas_.size());
  for (size_t r = 1; r < replicas_.size(); ++r) {
    for (const Tensor& p : parameters_[r]) {
      if (!p.requires_grad()) {
        hook_handles_[r].push_back(0);
        continue;
      }
      hook_handles_[r].push_back(p.register_post_accumulate_grad_hook([this](const Tensor&) {
        if (gather_queued_) return;
        gather_queued_ = true;
        autograd::queue_callback([this] { gather_gradients(); });
      }));
    }
  }
}

DataParallel::~DataParallel() {
  for (size_t r = 1; r < replicas_.size(); ++r) {
    for (size_t i = 0; i < parameters_[r].size(); ++i) {
      if (hook_handles_[r][i] != 0) parameters_[r][i].remove_hook(hook_handles_[r][i]);
    }
  }
}

void DataParallel::copy_state_to_replicas() {
  NoGradGuard no_grad;
  for (size_t r = 1; r < replicas_.size(); ++r) {
    for (size_t i = 0; i < parameters_[0].size(); ++i) parameters_[r][i].copy_(parameters_[0][i]);
    for (size_t i = 0; i < buffers_[0].size(); ++i) buffers_[r][i].copy_(buffers_[0][i]);
    replicas_[r]->train(is_training());
  }
}

Tensor DataParallel::forward(const Tensor& input) {
  nn::TensorList outputs = module_->call_with_hooks({input}, [this](const nn::TensorList& x) {
    KILN_CHECK(x.size() == 1, "DataParallel: a forward pre-hook of ", module_->name(), " returned ", x.size(),
               " inputs; DataParallel splits one");
    return nn::TensorList{split_and_run(x[0])};
  });
  return outputs[0];
}

Tensor DataParallel::split_and_run(const Tensor& input) {
  if (replicas_.size() == 1) return run_with(ThreadSettings(), *module_, input.to(devices_[0]));
  KILN_CHECK(input.dim() >= 1 && input.size(0) >= 1, "DataParallel: the input must have a batch dimension with "
                                                     "at least one row, got shape ",
             input.shape());
  copy_state_to_replicas();
  // chunks: ceil(N / k) rows each, as Tensor.chunk; fewer than k when N < k.
  const int64_t n = input.size(0);
  const int64_t k = static_cast<int64_t>(replicas_.size());
  const int64_t rows = (n + k - 1) / k;
  std::vector<Tensor> chunks;
  for (int64_t start = 0; start < n; start += rows) {
    const size_t r = chunks.size();
    chunks.push_back(input.narrow(0, start, std::min(rows, n - start)).to(devices_[r]));
  }
  const ThreadSettings settings;
  std::vector<Tensor> outputs(chunks.size());
  std::vector<std::exception_ptr> errors(chunks.size());
  std::vector<std::thread> threads;
  for (size_t r = 1; r < chunks.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        outputs[r] = run_with(settings, *replicas_[r], chunks[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  try {
    outputs[0] = run_with(settings, *replicas_[0], chunks[0]);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& t : threads) t.join();
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      KILN_FAIL("DataParallel: replica ", r, " on ", devices_[r].str(), " failed: ", e.what());
    }
  }
  for (Tensor& out : outputs) out = out.to(devices_[0]);
  return cat(outputs, 0);
}

void DataParallel::gather_gradients() {
  gather_queued_ = false;
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_[0].size(); ++i) {
    const Tensor& original = parameters_[0][i];
    Tensor sum = original.grad();
    for (size_t r = 1; r < replicas_.size(); ++r) {
      const Tensor& p = parameters_[r][i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      Tensor here = g.to(devices_[0]);
      sum = sum.defined() ? kiln::add(sum, here) : here.clone();
      p.set_grad(Tensor());  // the next backward starts this replica afresh
    }
    if (sum.defined()) original.set_grad(sum);
  }
}

}  // namespace kiln::distributed
