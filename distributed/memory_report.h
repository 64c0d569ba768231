// What one rank holds in memory for training: parameters, gradients and
// optimizer state, counted from the tensors themselves, beside what the
// allocator says is in use and its peak.
//
//   auto report = distributed::memory_report(*model, &opt);
//   std::printf("rank %d: %s\n", rank, report.str().c_str());
//   // rank 0: params 1.06 MiB, grads 546.0 KiB, optimizer 1.07 MiB, allocated 2.69 MiB, peak 4.20 MiB (cpu)
//
// Each category counts every Storage once, all of its bytes: tensors that
// share one buffer (DDP's gradients are views of its buckets, an FSDP
// unit's parameters views of one flat shard, ZeRO stage 2's owned
// gradients views of its buckets) are that buffer, and a view of part of a
// buffer still holds the whole buffer. Only tensors on `device` count, so
// that the three sums compare with that device's allocator; a trainer that
// offloads to the host asks for each device.
//
// The optimizer's state is what Optimizer::state(param) holds for the
// parameters of its groups. A ZeroRedundancyOptimizer reports its local
// optimizer's, the state of this rank's partition only (the overload below).
#pragma once

#include <cstddef>
#include <string>

#include "nn/module.h"
#include "optim/optimizer.h"
#include "tensor/device.h"

namespace kiln::distributed {

class ZeroRedundancyOptimizer;

struct MemoryReport {
  size_t parameter_bytes = 0;
  size_t gradient_bytes = 0;
  size_t optimizer_state_bytes = 0;
  // The device allocator's tensor memory in use now, and the most in use
  // since the start or the last reset of its peak (cpu_reset_peak_allocated_bytes,
  // cuda::reset_peak_memory_stats).
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
  std::string device;  // "cpu", "cuda:0"

  // "params 12.3 MiB, grads 12.3 MiB, optimizer 24.6 MiB, allocated 60.1 MiB, peak 75.0 MiB (cpu)"
  std::string str() const;
};

// The parameters of `module` (and their .grad()) and the state `optimizer`
// (may be null) keeps, on `device`. Throws for a CUDA device in a build
// without CUDA, or one that is not usable.
MemoryReport memory_report(const nn::Module& module, const optim::Optimizer* optimizer, Device device = kCPU);
// With a ZeroRedundancyOptimizer: its local optimizer's state.
MemoryReport memory_report(const nn::Module& module, const ZeroRedundancyOptimizer& optimizer, Device device = kCPU);

// "512 B", "1.5 KiB", "12.3 MiB", "2.00 GiB": what str() writes.
std::string format_bytes(size_t bytes);

}  // namespace kiln::distributed
