// Allocators hand out raw device memory to Storage.
//
// Note [Allocators]
// Every Storage remembers the Allocator that made it and returns its memory
// there. The CPU allocator aligns to 64 bytes (one cache line, one AVX-512
// register) so that kernels may use aligned loads at the start of a tensor.
// The CUDA backend installs its own allocator for DeviceType::CUDA (a caching
// allocator: size-class bins, block splitting, stream-aware reuse), which is
// why allocation goes through this interface rather than calling malloc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/device.h"

namespace kiln {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `nbytes` bytes on `device` (nullptr when nbytes == 0);
  // throws kiln::Error when out of memory.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
};

// The 64-byte-aligned host allocator; it caches large blocks for reuse
// (Note [CPU allocator] in allocator.cpp).
Allocator& cpu_allocator();
// Returns the CPU allocator's cached blocks to the system.
void cpu_empty_cache();
// Bytes held in the CPU allocator's cache.
size_t cpu_cached_bytes();
// Bytes of CPU tensor memory in use now, and the most in use since the last
// cpu_reset_peak_allocated_bytes() (or since the start).
size_t cpu_allocated_bytes();
size_t cpu_peak_allocated_bytes();
void cpu_reset_peak_allocated_bytes();

// The allocator used for new tensors on `type`; the CUDA backend registers
// its own at start-up. Throws kiln::Error if none is registered.
Allocator& allocator_for(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

inline constexpr size_t kCpuAlignment = 64;

}  // namespace kiln
