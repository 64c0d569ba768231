// Allocators hand out raw device memory to Storage.
//
// Note [Allocators]
// Every Storage remembers the Allocator that made it and returns its memory
// there. The CPU allocator aligns to 64 bytes (one cache line, one AVX-512
// register) so that kernels may use aligned loads at the start of a tensor.
// The CUDA backend installs its own allocator for DeviceType::CUDA (a caching
// allocator: size-class bins, block splitting, stream-aware reuse), which is
// why allocation goes through this interface rather than calling malloc.
//
// Note [Pinned memory]
// A copy between the GPU and ordinary (pageable) host memory is staged by the
// driver through a page-locked bounce buffer, and cannot overlap the host's
// work. Page-locked ("pinned") host memory, which the OS may not swap or
// move, is read by the GPU's DMA engines directly: the copy runs at full bus
// speed and, once copies are queued asynchronously, alongside compute. As in
// PyTorch, `t.pin_memory()` returns a contiguous copy of a CPU tensor in
// pinned memory, `t.is_pinned()` says whether its storage is, and the
// DataLoader's pin_memory option pins each batch in the worker that builds
// it, so the page-locking copy overlaps the training step.
// - Pinned memory is CPU memory: its tensors have device kCPU and every CPU
//   kernel reads them. Only the allocator differs; the Storage remembers that
//   it came from the pinned allocator (Storage::is_pinned), so views share it.
// - Page-locking is the CUDA driver's job (cudaHostAlloc), so the tensor
//   layer keeps only a slot for a pinned allocator. In a CUDA build the slot
//   is filled from tensor/cuda/pinned_allocator.h the first time it is
//   consulted, and only if a device is present: asking the driver at library
//   load would start it in every process, CPU-only ones included. A CPU-only
//   build, or a machine without a usable GPU, has an empty slot, and pinning
//   throws "no CUDA device is available to page-lock host memory", as PyTorch
//   does. Tests install a plain host allocator with set_pinned_allocator to
//   check everything above the driver.
// - Page-locked memory is scarce and slow to obtain (cudaHostAlloc maps and
//   locks every page, milliseconds for a batch), so the CUDA allocator caches
//   freed blocks by size, as the CPU allocator does (Note [CPU allocator]).
//   Host-to-device copies from pinned memory are asynchronous
//   (tensor/cuda/copy.cu), so a block freed while its copy is queued records
//   an event on the copy's stream and is reused only once the event has
//   completed, as in PyTorch's CachingHostAllocator (Note [CUDA pinned
//   allocator]).
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
// A cap on the CPU tensor memory of this process, in bytes (0: none): an
// allocation that would bring cpu_allocated_bytes() above it throws
// "CpuAllocator: out of memory: ..." naming the request, the bytes in use
// and the limit, as a GPU's allocator does when its memory is full. It
// starts as KILN_CPU_MEMORY_LIMIT (bytes, or with a K, M or G suffix of
// powers of 1024: "512M"); a malformed value is an error at the first
// allocation. What FSDP's memory test runs a model that does not fit under.
void set_cpu_memory_limit(size_t bytes);
size_t cpu_memory_limit();

// The allocator used for new tensors on `type`; the CUDA backend registers
// its own at start-up. Throws kiln::Error if none is registered.
Allocator& allocator_for(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

// The pinned host allocator (Note [Pinned memory]): memory from it is on
// kCPU and page-locked. pinned_allocator_available() is false in a CPU-only
// build and on a machine without a usable GPU; pinned_allocator(op) then
// throws "<op>: no CUDA device is available to page-lock host memory (why)".
bool pinned_allocator_available();
Allocator& pinned_allocator(const char* op = "pinned_allocator");
// Installs `allocator` (nullptr empties the slot) and returns the one it
// replaces, so that a caller can put it back:
//   Allocator* previous = set_pinned_allocator(&mine); ...; set_pinned_allocator(previous);
Allocator* set_pinned_allocator(Allocator* allocator);

inline constexpr size_t kCpuAlignment = 64;

}  // namespace kiln
