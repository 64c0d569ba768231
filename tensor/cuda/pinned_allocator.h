// Page-locked host memory from the CUDA driver (Note [Pinned memory] in
// tensor/allocator.h).
//
// This header does not include the CUDA runtime: tensor/allocator.cpp asks it
// for the allocator from plain C++.
#pragma once

#include <cstddef>

#include "tensor/allocator.h"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

// The caching cudaHostAlloc allocator (Note [CUDA pinned allocator] in
// pinned_allocator.cpp). Its memory is on kCPU; allocate() throws kiln::Error
// when the driver refuses (no device, out of page-lockable memory).
Allocator& pinned_host_allocator();

// pinned_host_allocator() when at least one CUDA device is usable, else
// nullptr. Safe without a driver or a GPU: it only asks for the device count.
// tensor/allocator.cpp fills the pinned slot with it on first use.
Allocator* pinned_host_allocator_if_available();

// Says that work queued on `stream` of `device` (an asynchronous copy)
// reads or writes the pinned block starting at `ptr`: once the block is
// freed, it is not handed out again before that work has finished. Returns
// false, recording nothing, when `ptr` is not the start of a block of
// pinned_host_allocator() in use (the caller must then not rely on the copy
// being asynchronous). Never throws.
bool record_pinned_use(const void* ptr, cudaStream_t stream, Device device);

// Returns the cached page-locked blocks to the driver (cudaFreeHost), after
// waiting for the work recorded on freed blocks.
void pinned_empty_cache();
// Bytes held in the cache, and bytes of pinned tensors in use now.
size_t pinned_cached_bytes();
size_t pinned_allocated_bytes();

}  // namespace kiln::cuda
