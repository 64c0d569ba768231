#include "tensor/allocator.h"

#include <array>
#include <cstdlib>

#include "tensor/error.h"

namespace kiln {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    KILN_CHECK(device.is_cpu(), "CpuAllocator: asked for memory on ", device);
    if (nbytes == 0) return nullptr;
    // aligned_alloc requires the size to be a multiple of the alignment.
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded);
    KILN_CHECK(ptr != nullptr, "CpuAllocator: out of memory allocating ", nbytes, " bytes");
    return ptr;
  }
  void deallocate(void* ptr, size_t, Device) override { std::free(ptr); }
};

std::array<Allocator*, kNumDeviceTypes>& allocators() {
  static std::array<Allocator*, kNumDeviceTypes> table{&cpu_allocator(), nullptr};
  return table;
}

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

Allocator& allocator_for(DeviceType type) {
  Allocator* allocator = allocators()[static_cast<int>(type)];
  KILN_CHECK(allocator != nullptr, "allocator_for: no allocator for ", Device(type),
             "; Kiln was built without support for this device (KILN_CUDA=OFF?)");
  return *allocator;
}

void set_allocator(DeviceType type, Allocator* allocator) { allocators()[static_cast<int>(type)] = allocator; }

}  // namespace kiln
