// Which host a process runs on, and whether a process there is still alive:
// what lets one rank judge another without waiting for a timeout.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::distributed {

// This host's name ("" if it cannot be read).
std::string host_name();

// Ranks with equal identities can map one shared-memory segment and see
// each other's processes: host name, boot id, and the IPC and PID
// namespaces. "" when some part cannot be read.
std::string host_identity();

// Ranks with equal tokens see each other's pids: the boot id and the PID
// namespace, without spaces. "" when they cannot be read.
std::string pid_namespace_token();

// Whether `pid` is a live process in this PID namespace. A process that has
// died but not yet been reaped (a zombie) counts as dead.
bool process_alive(int64_t pid);

}  // namespace kiln::distributed
