// Memory accounting by unique storage (memory_report.h).
#include "distributed/memory_report.h"

#include <cstdio>
#include <iterator>
#include <unordered_set>

#include "distributed/zero/zero_redundancy_optimizer.h"
#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/storage.h"

#include "tensor/cuda_status.h"

namespace kiln::distributed {

namespace {

// Adds the bytes of `t`'s storage to `bytes` the first time it is seen.
class StorageCounter {
 public:
  explicit StorageCounter(Device device) : device_(device) {}
  void add(const Tensor& t) {
    if (!t.defined() || t.device() != device_) return;
    if (seen_.insert(t.storage().get()).second) bytes_ += t.storage()->nbytes();
  }
  size_t bytes() const { return bytes_; }

 private:
  Device device_;
  std::unordered_set<const Storage*> seen_;
  size_t bytes_ = 0;
};

}  // namespace

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%zu B", bytes);
  } else {
    std::snprintf(text, sizeof(text), value < 10.0 ? "%.2f %s" : "%.1f %s", value, units[unit]);
  }
  return text;
}

std::string MemoryReport::str() const {
  return "params " + format_bytes(parameter_bytes) + ", grads " + format_bytes(gradient_bytes) + ", optimizer " +
         format_bytes(optimizer_state_bytes) + ", allocated " + format_bytes(allocated_bytes) + ", peak " +
         format_bytes(peak_allocated_bytes) + " (" + device + ")";
}

MemoryReport memory_report(const nn::Module& module, const optim::Optimizer* optimizer, Device device) {
  MemoryReport report;
  report.device = device.str();
  StorageCounter params(device), grads(device), state(device);
  for (const Tensor& p : module.parameters()) {
    params.add(p);
    grads.add(p.grad());
  }
  if (optimizer != nullptr) {
    for (size_t g = 0; g < optimizer->num_param_groups(); ++g) {
      for (const Tensor& p : optimizer->params(g)) {
        for (const auto& [name, t] : optimizer->state(p)) state.add(t);
      }
    }
  }
  report.parameter_bytes = params.bytes();
  report.gradient_bytes = grads.bytes();
  report.optimizer_state_bytes = state.bytes();
  if (device.is_cpu()) {
    report.allocated_bytes = cpu_allocated_bytes();
    report.peak_allocated_bytes = cpu_peak_allocated_bytes();
  } else {
    const cuda::MemoryStats stats = cuda::memory_stats(device);
    report.allocated_bytes = stats.allocated_bytes;
    report.peak_allocated_bytes = stats.peak_allocated_bytes;
  }
  return report;
}

MemoryReport memory_report(const nn::Module& module, const ZeroRedundancyOptimizer& optimizer, Device device) {
  return memory_report(module, &optimizer.local_optimizer(), device);
}

}  // namespace kiln::distributed
