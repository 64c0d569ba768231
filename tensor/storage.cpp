#include "tensor/storage.h"

namespace kiln {

Storage::Storage(void* data, size_t nbytes, Device device, Allocator* allocator,
                 std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), allocator_(allocator), deleter_(std::move(deleter)) {}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  Allocator& allocator = allocator_for(device.type);
  void* data = allocator.allocate(nbytes, device);
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, &allocator, {}));
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
