#include "tensor/kernel_group.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace kiln::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::pair<std::type_index, DeviceType>, KernelGroup*> groups;
};

// A function-local static, so that registrations from other files' static
// initialisers find it constructed whatever order those run in.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_kernel_group(std::type_index group, std::string_view group_name, DeviceType type,
                           KernelGroup* impl) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] = r.groups.emplace(std::make_pair(group, type), impl);
  KILN_CHECK(inserted, "register_kernel_group: ", group_name, " kernels registered twice for device type ",
             type == DeviceType::CPU ? "cpu" : "cuda");
}

KernelGroup* find_kernel_group(std::type_index group, DeviceType type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.groups.find(std::make_pair(group, type));
  return it == r.groups.end() ? nullptr : it->second;
}

void throw_kernel_group_missing(std::string_view op, std::string_view group_name, Device device) {
  KILN_FAIL(op, ": ", group_name, " kernels are not supported on ", device);
}

}  // namespace kiln::detail
