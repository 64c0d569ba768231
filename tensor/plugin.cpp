// Loading the optional backends' libraries (Note [Backends as plugins] in plugin.h).
#include "tensor/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <map>
#include <mutex>

#ifndef KILN_SOVERSION
#error "KILN_SOVERSION (the major version in the plugins' file names) is set by CMakeLists.txt"
#endif

namespace kiln {

namespace {

// The folder of the file libkiln was loaded from, with a trailing '/'; empty
// if the loader cannot say (then dlopen searches the library path).
std::string libkiln_folder() {
  static const std::string folder = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&load_plugin), &info) == 0 || info.dli_fname == nullptr) {
      return std::string();
    }
    const std::string path = info.dli_fname;
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  }();
  return folder;
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

PluginLoad open_plugin(const std::string& name) {
  const std::string path = plugin_path(name);
  if (!file_exists(path)) {
    // The CMake option that builds it; NCCL comes with the CUDA backend.
    const std::string option = name == "cuda" || name == "nccl" ? " (KILN_CUDA=OFF)"
                               : name == "mpi"                  ? " (KILN_MPI=OFF)"
                                                                : "";
    return {false, "this Kiln was built without its " + name + " backend" + option + ": " + path + " does not exist"};
  }
  // RTLD_NOW: a missing symbol shows here, with the library named, rather
  // than as a crash at the first call. RTLD_GLOBAL: what the plugin defines
  // once (template statics, type information) is then the one copy that
  // libraries loaded after it bind to, as when a program links it.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    return {false, "cannot load " + path + ": " + (why ? why : "unknown dlopen error")};
  }
  return {true, ""};
}

}  // namespace

std::string plugin_path(const std::string& name) {
  return libkiln_folder() + "libkiln_" + name + ".so." KILN_SOVERSION;
}

bool plugin_exists(const std::string& name) { return file_exists(plugin_path(name)); }

const PluginLoad& load_plugin(const std::string& name) {
  // Recursive: a plugin's static initialisers run inside dlopen, and one that
  // asks for its own backend must get an answer rather than a deadlock.
  static std::recursive_mutex mutex;
  static std::map<std::string, PluginLoad> loaded;  // node addresses are stable
  static std::map<std::string, bool> loading;
  std::lock_guard<std::recursive_mutex> lock(mutex);
  if (auto it = loaded.find(name); it != loaded.end()) return it->second;
  if (loading[name]) {
    static const PluginLoad in_progress{false, "is still being loaded (asked for by its own initialisers)"};
    return in_progress;
  }
  loading[name] = true;
  PluginLoad result = open_plugin(name);
  loading[name] = false;
  return loaded.emplace(name, std::move(result)).first->second;
}

}  // namespace kiln
