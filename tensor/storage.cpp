#include "tensor/storage.h"

namespace kiln {

Storage::Storage(void* data, size_t nbytes, Device device, Allocator* allocator,
                 std::function<void(void*)> deleter, bool pinned)
    : data_(data),
      nbytes_(nbytes),
      device_(device),
      allocator_(allocator),
      deleter_(std::move(deleter)),
      pinned_(pinned) {}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  Allocator& allocator = allocator_for(device.type);
  void* data = allocator.allocate(nbytes, device);
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, &allocator, {}));
}

std::shared_ptr<Storage> Storage::allocate_pinned(size_t nbytes, const char* op) {
  // The allocator is remembered, not looked up again when the memory is
  // freed: the slot may have been changed since (Note [Pinned memory]).
  Allocator& allocator = pinned_allocator(op);
  void* data = allocator.allocate(nbytes, kCPU);
  return std::shared_ptr<Storage>(new Storage(data, nbytes, kCPU, &allocator, {}, /*pinned=*/true));
}

std::shared_ptr<Storage> Storage::from_blob(void* data, size_t nbytes, Device device,
                                            std::function<void(void*)> deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, nullptr, std::move(deleter)));
}

Storage::~Storage() {
  if (allocator_) {
    allocator_->deallocate(data_, nbytes_, device_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace kiln
