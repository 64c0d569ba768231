#include "distributed/backends/gloo/gloo_device.h"

#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>

#include "tensor/error.h"

namespace kiln::distributed::gloo_backend {

namespace {

struct DeviceChoice {
  ::gloo::transport::tcp::attr attr;
  std::string description;
};

// True if `hostname` resolves to an address a socket can bind here, which
// is what Gloo will do with it.
bool can_bind(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(hostname.c_str(), nullptr, &hints, &result) != 0) return false;
  bool bound = false;
  for (addrinfo* a = result; a && !bound; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0 in the result: any free port
    close(fd);
  }
  freeaddrinfo(result);
  return bound;
}

DeviceChoice choose() {
  DeviceChoice choice;
  for (const char* variable : {"KILN_GLOO_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* value = std::getenv(variable);
    if (value && *value) {
      choice.attr.iface = value;
      choice.description = detail::str("interface ", value, " (", variable, ")");
      return choice;
    }
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && can_bind(name)) {
    choice.attr.hostname = name;
    choice.description = detail::str("host name ", name);
    return choice;
  }
  choice.attr.hostname = "127.0.0.1";
  choice.description =
      detail::str("127.0.0.1 (the host name '", name, "' does not resolve to an address this process can bind)");
  return choice;
}

}  // namespace

std::string tcp_device_choice() { return choose().description; }

std::shared_ptr<::gloo::transport::Device> make_tcp_device() {
  DeviceChoice choice = choose();
  try {
    return ::gloo::transport::tcp::CreateDevice(choice.attr);
  } catch (const std::exception& e) {
    KILN_FAIL("gloo: cannot listen on ", choice.description, ": ", e.what(),
              " (set KILN_GLOO_SOCKET_IFNAME to a network interface that the other ranks can reach)");
  }
}

}  // namespace kiln::distributed::gloo_backend
