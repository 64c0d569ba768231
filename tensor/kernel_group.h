// Kernel groups: kernels a backend offers beyond the core Backend interface.
//
// Note [Kernel groups]
// `Backend` (tensor/backend.h) is the closed list of kernels every device
// must have: copies, elementwise, reductions, GEMM, convolution, ... Adding
// a method there means editing every backend's class. Every op family
// added since is a *kernel group* instead: an interface of its own, which
// each backend implements in its own files and registers for its device
// type, and which a front-end asks for by type:
//
//   // tensor/scan_kernels.h: the interface, with the name errors use
//   class ScanKernels : public KernelGroup {
//    public:
//     static constexpr std::string_view kName = "scan";
//     virtual void scan(ScanOp op, const Tensor& out, const Tensor& in, int64_t dim, bool reverse) = 0;
//   };
//
//   // tensor/cpu/scan.cpp: one backend's implementation, registered once
//   class CpuScanKernels final : public ScanKernels { ... };
//   KILN_REGISTER_KERNEL_GROUP(ScanKernels, DeviceType::CPU, CpuScanKernels);
//
//   // tensor/scan.cpp: the front-end's one device decision
//   kernels_for<ScanKernels>(out.device(), "cumsum").scan(ScanOp::Sum, out, x, dim, false);
//
// So a new family touches its own files only: the interface, a front-end,
// one implementation file per backend (and its tests). A backend that has
// not implemented a group needs no change at all; asking it for the group
// throws "cumsum: scan kernels are not supported on cuda:0", naming the op
// and the device, where a missing Backend method would not have compiled.
//
// Registration runs when the file defining the implementation is loaded:
// at program start for libkiln's own files, and when a backend's shared
// library is loaded later (the reason for registering at all rather than
// listing the groups in each backend). libkiln is therefore always a
// shared library: in a static archive the linker would drop an
// implementation file that nothing names, and its group with it.
#pragma once

#include <array>
#include <atomic>
#include <string_view>
#include <typeindex>

#include "tensor/device.h"
#include "tensor/error.h"

namespace kiln {

// The base of every kernel-group interface. A group derives from it and
// names itself with `static constexpr std::string_view kName`.
class KernelGroup {
 public:
  virtual ~KernelGroup() = default;
};

namespace detail {

// `impl` (which lives as long as the program, or until its library is
// unloaded) implements `group` on every device of `type`. Registering a
// second implementation of a group for one device type is an error.
void register_kernel_group(std::type_index group, std::string_view group_name, DeviceType type,
                           KernelGroup* impl);
// nullptr when no implementation of `group` is registered for `type`.
KernelGroup* find_kernel_group(std::type_index group, DeviceType type);
[[noreturn]] void throw_kernel_group_missing(std::string_view op, std::string_view group_name, Device device);

}  // namespace detail

namespace detail {

// find_kernel_group for G, without the registry's lock once found: every op
// call asks, and a registration is never undone, so what was found is kept
// per group and device type. A missing group is asked again each time, as a
// backend's library may register it later.
template <class G>
KernelGroup* cached_kernel_group(DeviceType type) {
  static std::array<std::atomic<KernelGroup*>, kNumDeviceTypes> found{};
  std::atomic<KernelGroup*>& slot = found[static_cast<size_t>(type)];
  KernelGroup* impl = slot.load(std::memory_order_acquire);
  if (impl == nullptr) {
    impl = find_kernel_group(typeid(G), type);
    if (impl != nullptr) slot.store(impl, std::memory_order_release);
  }
  return impl;
}

}  // namespace detail

// The implementation of group G for `device`; throws kiln::Error naming `op`
// and the device when its backend has none.
template <class G>
G& kernels_for(Device device, std::string_view op) {
  KernelGroup* impl = detail::cached_kernel_group<G>(device.type);
  if (impl == nullptr) detail::throw_kernel_group_missing(op, G::kName, device);
  return static_cast<G&>(*impl);
}

// Whether `device`'s backend implements group G.
template <class G>
bool has_kernels(Device device) {
  return detail::cached_kernel_group<G>(device.type) != nullptr;
}

// Registers Impl (default-constructed once) as group Group's implementation
// on device type `type`; write it once, at namespace scope, in the file that
// defines Impl.
#define KILN_REGISTER_KERNEL_GROUP(Group, type, Impl)                                                   \
  [[maybe_unused]] static const bool kiln_kernel_group_registered_##Impl = [] {                          \
    static Impl instance;                                                                                \
    ::kiln::detail::register_kernel_group(typeid(Group), Group::kName, type, &instance);                \
    return true;                                                                                         \
  }()

}  // namespace kiln
