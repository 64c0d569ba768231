// The Gloo TCP device: the address this process listens on for its peers.
//
// Note [Gloo interface]
// Every Gloo pair is a TCP connection, and each rank must listen on an
// address that its peers can reach. Before the device is made, every rank of
// the world group posts a HostReport in the store (step 2 of Note [Gloo
// rendezvous steps]): which host it runs on, its host name, and the local
// address of its store connection. Each rank then takes the first rule that
// applies:
// 1. KILN_GLOO_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME, names a network
//    interface ("eth0", "ib0"): listen on that interface's address. The
//    override, for hosts whose store traffic goes over another network than
//    the one training should use.
// 2. Every rank reported this host: 127.0.0.1. Loopback always routes, and
//    nothing listens beyond the machine.
// 3. The store connection's local address, when it is not a loopback one:
//    the kernel chose it to reach the store's host, so the other hosts,
//    which reach that same host, can reach this one through it (one network
//    among the nodes, as torchrun assumes too). This is what makes
//    `kiln-run --nnodes 2 --master-addr 10.0.0.1` work with nothing set.
// 4. The store connection is over loopback (this is the store's host, and
//    MASTER_ADDR is 127.0.0.1 or a name that resolves to 127.0.1.1): the
//    address the kernel would use to reach the first rank on another host,
//    at the store address that rank reported (a UDP socket connected there
//    tells, without sending anything).
// 5. No socket to ask (a FileStore): the host name, if it resolves to an
//    address that is not loopback and that this process can bind. Otherwise
//    make_tcp_device throws, naming the host name and the variable to set,
//    rather than listen on loopback where no other host can reach it.
// "A host" is a kernel and a network namespace (boot id and namespace
// inode): two containers or namespaces on one machine have loopbacks apart,
// so they count as two hosts, whatever their host names say.
// One device serves all groups of a process: the world group chooses, its
// sub-groups make their own gloo contexts and pairs on the same device.
//
// Only the Gloo backend's own sources include this header (it includes gloo's).
#pragma once

#include <gloo/transport/device.h>

#include <memory>
#include <string>
#include <vector>

#include "distributed/store.h"

namespace kiln::distributed::gloo_backend {

// What a rank tells the others about where it runs (Note [Gloo interface]).
struct HostReport {
  std::string host_id;        // boot id and network namespace: equal on one host
  std::string host_name;      // for messages
  std::string store_address;  // local address of the store connection; "" without one
  std::string encode() const;
  // Throws kiln::Error for text that encode() did not make.
  static HostReport decode(const std::string& text);
};

// This process's report; `store` is the group's store (a PrefixStore over a
// TCPStore reports the TCPStore's connection).
HostReport this_host(const Store& store);

// The address the kernel would use to reach `peer` (a numeric address), ""
// if there is no route.
std::string local_address_towards(const std::string& peer);

// The rule of Note [Gloo interface] that applies to `hosts[rank]` among
// `hosts`, and what to listen on.
struct TcpDeviceChoice {
  std::string interface;  // set by rule 1
  std::string address;    // numeric address or host name, set by rules 2 to 5
  // "interface eth0 (KILN_GLOO_SOCKET_IFNAME)", "127.0.0.1 (every rank runs
  // on this host)", "10.0.0.2 (the address this host reaches the store
  // through)", ...
  std::string description;
};
TcpDeviceChoice choose_tcp_device(const std::vector<HostReport>& hosts, int rank);

// Creates the device `choice` names; throws kiln::Error naming the interface
// or address that cannot be used (or, for rule 5 without a usable host name,
// why there is nothing to listen on).
std::shared_ptr<::gloo::transport::Device> make_tcp_device(const TcpDeviceChoice& choice);

}  // namespace kiln::distributed::gloo_backend
