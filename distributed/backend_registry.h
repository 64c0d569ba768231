// The process-group backends by name ("gloo", "nccl", "mpi"), as
// init_process_group and make_process_group find them.
//
// Gloo is part of libkiln and registers itself when libkiln loads; NCCL and
// MPI are libraries of their own (libkiln_nccl, libkiln_mpi), loaded the first
// time their name is asked for, that register themselves when loaded (Note
// [Backends as plugins] in tensor/plugin.h). So a program that never uses
// NCCL or MPI never needs their libraries, and one that asks for a backend
// whose library cannot be loaded gets an error naming what is missing.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/store.h"

namespace kiln::distributed {

struct ProcessGroupBackend {
  // A group of `world_size` ranks over `store`, this process being `rank`.
  std::function<std::shared_ptr<ProcessGroup>(std::shared_ptr<Store> store, int rank, int world_size,
                                              ProcessGroupOptions options)>
      create;
  // For a backend whose launcher knows the world (MPI: mpirun starts the
  // processes), its size; empty for the others.
  std::function<int()> launcher_world_size;
};

// Called by each backend's static initialiser; a second registration of one
// name is an error.
void register_process_group_backend(const std::string& name, ProcessGroupBackend backend);

// The backend `name`, loading its library first if it is a plugin not yet
// loaded; throws kiln::Error naming `op`, the backend and why it is not
// available (never built, or its library or one it needs cannot be loaded).
const ProcessGroupBackend& process_group_backend(const std::string& name, const char* op);

// The backends this build has: those registered, and the plugins installed
// beside libkiln (which may still fail to load).
std::vector<std::string> registered_or_installed_backends();

}  // namespace kiln::distributed
