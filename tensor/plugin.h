// Kiln's optional backends as libraries loaded when first asked for: the
// CUDA backend (libkiln_cuda), the NCCL process group (libkiln_nccl) and the
// MPI one (libkiln_mpi).
//
// Note [Backends as plugins]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// libkiln itself links nothing of CUDA, cuDNN, NCCL or MPI, so a program that
// trains on the CPU starts on a machine that has none of them, and an outside
// project configures against a CUDA build of Kiln without the CUDA toolkit.
// Each optional backend is a shared library of its own, installed beside
// libkiln, that links libkiln and its vendor's libraries. When loaded, its
// static initialisers register what it provides with libkiln: the CUDA
// library its CudaHooks (cuda_hooks.h) and its kernel groups; NCCL and MPI
// their process groups (distributed/backend_registry.h).
//
// libkiln loads one with dlopen the first time something needs it (a tensor
// moved to a CUDA device, `cuda::is_available()`, pinned memory,
// `init_process_group("nccl")`), from the folder libkiln itself was loaded
// from, found with dladdr: the build tree's folder or the install's lib/, so
// no library path needs setting. A program that links the library directly
// (the CUDA tests, or a user of `kiln::kiln_cuda` for streams and graphs) has
// it registered before main; the dlopen then finds it already loaded.
//
// When loading fails, the loader's own words are kept and shown whenever the
// backend is asked for: "libcudart.so.13: cannot open shared object file"
// names the missing vendor library; a missing libkiln_cuda means Kiln was
// built without that backend. This is PyTorch's split of libtorch_cpu and
// libtorch_cuda (CUDAHooksInterface), done with dlopen instead of linking
// both, so that the CPU side never needs the GPU side's libraries.
#pragma once

#include <string>

namespace kiln {

struct PluginLoad {
  bool loaded = false;
  std::string error;  // why not, when !loaded
};

// Loads libkiln_<name>.so.<major> from libkiln's own folder, once; later calls
// return the first answer. Thread-safe.
const PluginLoad& load_plugin(const std::string& name);

// Whether libkiln_<name> was built and installed beside libkiln (without
// loading it): what available_backends() lists.
bool plugin_exists(const std::string& name);

// The full path load_plugin(name) opens.
std::string plugin_path(const std::string& name);

}  // namespace kiln
