// The Gloo TCP device: the address this process listens on for its peers.
//
// Note [Gloo interface]
// Every Gloo pair is a TCP connection, and each rank must listen on an
// address that its peers can reach. The address is chosen as PyTorch does:
// 1. KILN_GLOO_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME, names a network
//    interface ("eth0", "ib0"): listen on that interface's address. This is
//    the setting for multi-host jobs whose host names resolve to the wrong
//    network (or to 127.0.1.1, as Debian's /etc/hosts does).
// 2. Otherwise the host's name, if it resolves to an address this process
//    can bind. On one machine that is usually a loopback address (here
//    "vm" -> 127.0.0.1); across machines it is whatever DNS says.
// 3. Otherwise 127.0.0.1, which only works when all ranks share the host.
// One device serves all groups of a process (the world and its sub-groups):
// each group makes its own gloo context with its own pairs on it.
//
// Only the Gloo backend's own sources include this header (it includes gloo's).
#pragma once

#include <gloo/transport/device.h>

#include <memory>
#include <string>

namespace kiln::distributed::gloo_backend {

// Creates the device Note [Gloo interface] describes; throws kiln::Error
// naming the interface or host name that cannot be used.
std::shared_ptr<::gloo::transport::Device> make_tcp_device();

// Which rule of Note [Gloo interface] make_tcp_device() follows here and the
// interface or host it uses: "interface eth0 (KILN_GLOO_SOCKET_IFNAME)",
// "host name vm", "127.0.0.1 (the host name 'x' does not resolve)".
std::string tcp_device_choice();

}  // namespace kiln::distributed::gloo_backend
