// Storage: one contiguous block of device memory shared by a tensor and its views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tensor/allocator.h"
#include "tensor/device.h"

namespace kiln {

class Storage {
 public:
  // Fresh memory from the device's registered allocator.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // Fresh page-locked host memory from pinned_allocator(op) (Note [Pinned
  // memory]); throws kiln::Error naming `op` when there is no pinned allocator.
  static std::shared_ptr<Storage> allocate_pinned(size_t nbytes, const char* op = "Storage::allocate_pinned");
  // Wraps memory Kiln does not own; `deleter` (may be empty) runs when the
  // last tensor referring to it is gone.
  static std::shared_ptr<Storage> from_blob(void* data, size_t nbytes, Device device,
                                            std::function<void(void*)> deleter = {});

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // True when the memory came from the pinned allocator (allocate_pinned).
  bool is_pinned() const { return pinned_; }

 private:
  Storage(void* data, size_t nbytes, Device device, Allocator* allocator, std::function<void(void*)> deleter,
          bool pinned = false);

  void* data_;
  size_t nbytes_;
  Device device_;
  Allocator* allocator_;                 // set when Kiln allocated the memory
  std::function<void(void*)> deleter_;  // set for from_blob memory
  bool pinned_;                          // made by allocate_pinned: allocator_ page-locks
};

}  // namespace kiln
