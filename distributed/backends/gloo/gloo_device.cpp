#include "distributed/backends/gloo/gloo_device.h"

#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>

#include "distributed/process_identity.h"
#include "distributed/tcp_store.h"
#include "tensor/error.h"

namespace kiln::distributed::gloo_backend {

namespace {

bool is_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

std::string numeric_text(const sockaddr* address, socklen_t length) {
  char text[NI_MAXHOST] = {};
  if (::getnameinfo(address, length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return text;
}

// Whether the numeric address `text` is a loopback one ("" is not).
bool is_loopback_text(const std::string& text) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* result = nullptr;
  if (text.empty() || ::getaddrinfo(text.c_str(), nullptr, &hints, &result) != 0) return false;
  const bool loopback = is_loopback(result->ai_addr);
  ::freeaddrinfo(result);
  return loopback;
}

// The first address `hostname` resolves to that a socket can bind here
// (which is what Gloo will do with it), as text; "" if none.
std::string bindable_address(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(hostname.c_str(), nullptr, &hints, &result) != 0) return "";
  std::string found;
  for (addrinfo* a = result; a && found.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0) found = numeric_text(a->ai_addr, a->ai_addrlen);
    ::close(fd);
  }
  ::freeaddrinfo(result);
  return found;
}

// Boot id and network namespace (Note [Gloo interface]: what "a host" is).
std::string host_id() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat ns {};
  const bool has_ns = ::stat("/proc/self/ns/net", &ns) == 0;
  if (boot_id.empty() || !has_ns) return "host name " + host_name();
  return boot_id + "/net:" + std::to_string(ns.st_ino);
}

}  // namespace

std::string HostReport::encode() const { return host_id + "\n" + host_name + "\n" + store_address; }

HostReport HostReport::decode(const std::string& text) {
  HostReport report;
  std::istringstream in(text);
  const bool complete = std::getline(in, report.host_id) && std::getline(in, report.host_name);
  KILN_CHECK(complete, "gloo: a host report must be three lines (host id, host name, store address), got '", text,
             "'");
  std::getline(in, report.store_address);
  return report;
}

HostReport this_host(const Store& store) {
  HostReport report{host_id(), host_name(), ""};
  const Store* s = &store;
  while (const auto* prefixed = dynamic_cast<const PrefixStore*>(s)) s = prefixed->base().get();
  if (const auto* tcp = dynamic_cast<const TCPStore*>(s)) report.store_address = tcp->local_address();
  return report;
}

std::string local_address_towards(const std::string& peer) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  // Any port: a UDP connect only picks the route.
  if (peer.empty() || ::getaddrinfo(peer.c_str(), "9", &hints, &result) != 0) return "";
  std::string local;
  const int fd = ::socket(result->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      local = numeric_text(reinterpret_cast<const sockaddr*>(&address), length);
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(result);
  return local;
}

TcpDeviceChoice choose_tcp_device(const std::vector<HostReport>& hosts, int rank) {
  TcpDeviceChoice choice;
  for (const char* variable : {"KILN_GLOO_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* value = std::getenv(variable);
    if (value && *value) {
      choice.interface = value;
      choice.description = detail::str("interface ", value, " (", variable, ")");
      return choice;
    }
  }
  const HostReport& self = hosts.at(static_cast<size_t>(rank));
  const HostReport* other_host = nullptr;  // the first rank on another host
  int other_rank = -1;
  for (size_t r = 0; r < hosts.size() && !other_host; ++r) {
    if (hosts[r].host_id != self.host_id) {
      other_host = &hosts[r];
      other_rank = static_cast<int>(r);
    }
  }
  if (!other_host) {
    choice.address = "127.0.0.1";
    choice.description = "127.0.0.1 (every rank runs on this host)";
    return choice;
  }
  if (!self.store_address.empty() && !is_loopback_text(self.store_address)) {
    choice.address = self.store_address;
    choice.description = detail::str(self.store_address, " (the address this host reaches the store through)");
    return choice;
  }
  if (!self.store_address.empty()) {
    const std::string towards = local_address_towards(other_host->store_address);
    if (!towards.empty() && !is_loopback_text(towards)) {
      choice.address = towards;
      choice.description = detail::str(towards, " (the address this host reaches rank ", other_rank, " on ",
                                        other_host->host_name, " at ", other_host->store_address, " through)");
      return choice;
    }
  }
  const std::string bindable = bindable_address(self.host_name);
  if (!bindable.empty() && !is_loopback_text(bindable)) {
    choice.address = self.host_name;
    choice.description = detail::str("host name ", self.host_name, " (", bindable, ")");
    return choice;
  }
  choice.description = detail::str(
      "no address: rank ", other_rank, " runs on another host (", other_host->host_name, "), and this host's name '",
      self.host_name, "' resolves to ", bindable.empty() ? std::string("no address this process can bind") : bindable,
      self.store_address.empty() ? std::string(", and the store has no connection to take an address from")
                                 : detail::str(", and no route from ", self.store_address, " leads to rank ",
                                               other_rank, "'s ", other_host->store_address));
  return choice;
}

std::shared_ptr<::gloo::transport::Device> make_tcp_device(const TcpDeviceChoice& choice) {
  const char* hint = " (set KILN_GLOO_SOCKET_IFNAME to a network interface that the other ranks can reach)";
  KILN_CHECK(!choice.interface.empty() || !choice.address.empty(), "gloo: cannot listen: ", choice.description, hint);
  ::gloo::transport::tcp::attr attr;
  attr.iface = choice.interface;
  attr.hostname = choice.address;
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    KILN_FAIL("gloo: cannot listen on ", choice.description, ": ", e.what(), hint);
  }
}

}  // namespace kiln::distributed::gloo_backend
