// The process-group backends by name (distributed/backend_registry.h).
#include "distributed/backend_registry.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "tensor/error.h"
#include "tensor/plugin.h"

namespace kiln::distributed {

namespace {

// The backends that live in a library of their own.
const std::vector<std::string>& plugin_backends() {
  static const std::vector<std::string> names{"nccl", "mpi"};
  return names;
}

bool is_plugin(const std::string& name) {
  const auto& plugins = plugin_backends();
  return std::find(plugins.begin(), plugins.end(), name) != plugins.end();
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, ProcessGroupBackend> backends;  // node addresses are stable
};

// Constructed on first use, so that registrations from static initialisers
// find it whatever order those run in.
Registry& registry() {
  static Registry r;
  return r;
}

const ProcessGroupBackend* find_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.backends.find(name);
  return it == r.backends.end() ? nullptr : &it->second;
}

}  // namespace

void register_process_group_backend(const std::string& name, ProcessGroupBackend backend) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  KILN_CHECK(backend.create, "register_process_group_backend('", name, "'): no create function");
  KILN_CHECK(r.backends.emplace(name, std::move(backend)).second, "register_process_group_backend: '", name,
             "' is registered twice");
}

const ProcessGroupBackend& process_group_backend(const std::string& name, const char* op) {
  if (const ProcessGroupBackend* found = find_backend(name)) return *found;
  KILN_CHECK(is_plugin(name), op, ": backend '", name, "' is not available in this build; it has ",
             registered_or_installed_backends());
  // Outside the registry's lock: the library registers itself while it loads.
  const PluginLoad& load = load_plugin(name);
  KILN_CHECK(load.loaded, op, ": backend '", name, "' is not available: ", load.error);
  const ProcessGroupBackend* found = find_backend(name);
  KILN_CHECK(found != nullptr, op, ": ", plugin_path(name), " was loaded but registered no '", name, "' backend");
  return *found;
}

std::vector<std::string> registered_or_installed_backends() {
  std::vector<std::string> names;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [name, backend] : r.backends) names.push_back(name);
  }
  for (const std::string& plugin : plugin_backends()) {
    if (std::find(names.begin(), names.end(), plugin) == names.end() && plugin_exists(plugin)) {
      names.push_back(plugin);
    }
  }
  // gloo first, as the default backend, then nccl and mpi.
  const std::vector<std::string> order{"gloo", "nccl", "mpi"};
  auto rank_of = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  std::stable_sort(names.begin(), names.end(),
                   [&](const std::string& a, const std::string& b) { return rank_of(a) < rank_of(b); });
  return names;
}

}  // namespace kiln::distributed
