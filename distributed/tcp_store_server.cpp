// TCPStoreServer: the map and the one thread that serves it (Note [TCP
// store protocol] in tcp_store.h).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "distributed/tcp_store.h"
#include "distributed/tcp_store_protocol.h"
#include "tensor/error.h"

namespace kiln::distributed {
namespace {

using namespace tcp_store_protocol;
using Clock = std::chrono::steady_clock;

// A request may be buffered whole before it is parsed; beyond that the
// server stops reading from the client until the request is handled.
constexpr size_t kMaxBuffered = 4 + size_t{kMaxTcpStoreMessageBytes};

struct Client {
  int fd = -1;
  std::vector<uint8_t> in;   // received bytes not yet handled
  std::vector<uint8_t> out;  // reply bytes not yet sent, from out_sent on
  size_t out_sent = 0;
  bool closed = false;
  // A WAIT whose reply is held back until `wait_keys` are all set or
  // `wait_deadline` passes; the client's later requests wait behind it.
  bool waiting = false;
  std::vector<std::string> wait_keys;
  Clock::time_point wait_deadline;

  bool has_output() const { return out_sent < out.size(); }
};

class ServerLoop {
 public:
  ServerLoop(int listen_fd, int stop_fd) : listen_fd_(listen_fd), stop_fd_(stop_fd) {}
  ~ServerLoop() {
    for (Client& c : clients_) ::close(c.fd);
  }
  void run();

 private:
  void accept_clients();
  void read_from(Client& c);
  void flush(Client& c);
  // Handles the client's buffered requests until one must wait, its reply
  // cannot be sent yet, or no whole request is left; false if it handled none.
  bool handle_requests(Client& c);
  // False for a malformed request: the caller closes the connection.
  bool handle(Client& c, MessageReader& request);
  void reply(Client& c, std::vector<uint8_t> message);
  void release_waiters();
  void expire_waiters();
  bool all_set(const std::vector<std::string>& keys) const;
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  int next_timeout_ms() const;

  int listen_fd_;
  int stop_fd_;
  std::vector<Client> clients_;
  std::map<std::string, std::vector<uint8_t>> data_;
};

void ServerLoop::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({stop_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Client& c : clients_) {
      short events = 0;
      if (c.in.size() < kMaxBuffered) events |= POLLIN;
      if (c.has_output()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
    }
    const int n = ::poll(fds.data(), fds.size(), next_timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "kiln tcp store server: poll failed (%s); stopping\n", error_text(errno).c_str());
      return;
    }
    if (fds[0].revents != 0) return;
    // fds[2 + i] belongs to clients_[i]: accept only after this loop.
    for (size_t i = 0; i < clients_.size(); ++i) {
      const short revents = fds[2 + i].revents;
      if (revents & (POLLIN | POLLHUP | POLLERR)) read_from(clients_[i]);
      if ((revents & POLLOUT) && !clients_[i].closed) flush(clients_[i]);
    }
    if (fds[1].revents & POLLIN) accept_clients();
    expire_waiters();
    bool progress = true;
    while (progress) {
      progress = false;
      for (Client& c : clients_) {
        if (!c.closed && handle_requests(c)) progress = true;
      }
    }
    std::erase_if(clients_, [](const Client& c) {
      if (c.closed) ::close(c.fd);
      return c.closed;
    });
  }
}

void ServerLoop::accept_clients() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EAGAIN: none left. EMFILE and the like: the next poll() retries.
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Client c;
    c.fd = fd;
    clients_.push_back(std::move(c));
  }
}

void ServerLoop::read_from(Client& c) {
  uint8_t chunk[65536];
  while (c.in.size() < kMaxBuffered) {
    const size_t want = std::min(sizeof(chunk), kMaxBuffered - c.in.size());
    const ssize_t got = ::recv(c.fd, chunk, want, 0);
    if (got > 0) {
      c.in.insert(c.in.end(), chunk, chunk + got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.closed = true;  // 0: the client went away; < 0: the connection broke
    return;
  }
}

void ServerLoop::flush(Client& c) {
  while (c.has_output()) {
    const ssize_t sent = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (sent >= 0) {
      c.out_sent += static_cast<size_t>(sent);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) c.closed = true;
    return;
  }
  c.out.clear();
  c.out_sent = 0;
}

void ServerLoop::reply(Client& c, std::vector<uint8_t> message) {
  if (c.out.empty()) {
    c.out = std::move(message);
  } else {
    c.out.insert(c.out.end(), message.begin(), message.end());
  }
  flush(c);
}

bool ServerLoop::handle_requests(Client& c) {
  bool handled = false;
  // One reply in flight per client: a client that sends requests without
  // reading the replies is read no further until it does.
  while (!c.closed && !c.waiting && !c.has_output() && c.in.size() >= 4) {
    const uint32_t length = read_le32(c.in.data());
    if (length == 0 || length > kMaxTcpStoreMessageBytes) {
      c.closed = true;
      break;
    }
    if (c.in.size() < 4 + size_t{length}) break;
    MessageReader request(c.in.data() + 4, length);
    const bool ok = handle(c, request);
    c.in.erase(c.in.begin(), c.in.begin() + 4 + length);
    if (!ok) c.closed = true;
    handled = true;
  }
  return handled;
}

bool ServerLoop::handle(Client& c, MessageReader& request) {
  uint8_t command = 0;
  if (!request.u8(command)) return false;
  MessageWriter out;
  out.u8(static_cast<uint8_t>(Status::kOk));
  std::string key;
  switch (static_cast<Command>(command)) {
    case Command::kSet: {
      std::vector<uint8_t> value;
      if (!request.str(key) || !request.bytes(value) || !request.at_end()) return false;
      data_[key] = std::move(value);
      reply(c, out.finish());
      release_waiters();
      return true;
    }
    case Command::kGet: {
      if (!request.str(key) || !request.at_end()) return false;
      const auto it = data_.find(key);
      out.u8(it != data_.end());
      if (it != data_.end()) {
        out.bytes(it->second);
      } else {
        out.bytes(nullptr, 0);
      }
      reply(c, out.finish());
      return true;
    }
    case Command::kAdd: {
      int64_t delta = 0;
      if (!request.str(key) || !request.i64(delta) || !request.at_end()) return false;
      int64_t value = 0;
      const auto it = data_.find(key);
      if (it != data_.end()) {
        const char* first = reinterpret_cast<const char*>(it->second.data());
        const char* last = first + it->second.size();
        const auto parsed = std::from_chars(first, last, value);
        if (parsed.ec != std::errc() || parsed.ptr != last || __builtin_add_overflow(value, delta, &value)) {
          const std::string shown(first, std::min<size_t>(it->second.size(), 64));
          MessageWriter error;
          error.u8(static_cast<uint8_t>(Status::kError));
          error.str("its value '" + shown + "' is not an integer, or adding " + std::to_string(delta) +
                    " to it overflows int64");
          reply(c, error.finish());
          return true;
        }
      } else {
        value = delta;
      }
      const std::string text = std::to_string(value);
      data_[key] = std::vector<uint8_t>(text.begin(), text.end());
      out.i64(value);
      reply(c, out.finish());
      release_waiters();
      return true;
    }
    case Command::kCompareSet: {
      std::vector<uint8_t> expected, desired;
      if (!request.str(key) || !request.bytes(expected) || !request.bytes(desired) || !request.at_end()) {
        return false;
      }
      const auto it = data_.find(key);
      const bool matches = it == data_.end() ? expected.empty() : it->second == expected;
      if (matches) data_[key] = desired;
      const auto now = data_.find(key);
      if (now != data_.end()) {
        out.bytes(now->second);
      } else {
        out.bytes(nullptr, 0);
      }
      reply(c, out.finish());
      if (matches) release_waiters();
      return true;
    }
    case Command::kWait: {
      std::vector<std::string> keys;
      int64_t timeout_ms = 0;
      if (!request.strs(keys) || !request.i64(timeout_ms) || !request.at_end() || timeout_ms < 0) return false;
      if (all_set(keys)) {
        reply(c, out.finish());
        return true;
      }
      c.waiting = true;
      c.wait_keys = std::move(keys);
      c.wait_deadline = deadline_after(std::chrono::milliseconds(timeout_ms));
      return true;
    }
    case Command::kCheck: {
      std::vector<std::string> keys;
      if (!request.strs(keys) || !request.at_end()) return false;
      out.u8(all_set(keys));
      reply(c, out.finish());
      return true;
    }
    case Command::kDelete: {
      if (!request.str(key) || !request.at_end()) return false;
      out.u8(data_.erase(key) > 0);
      reply(c, out.finish());
      return true;
    }
    case Command::kNumKeys: {
      if (!request.at_end()) return false;
      out.i64(static_cast<int64_t>(data_.size()));
      reply(c, out.finish());
      return true;
    }
    case Command::kPing: {
      int64_t magic = 0;
      if (!request.i64(magic) || !request.at_end() || magic != kPingMagic) return false;
      out.i64(kPingMagic);
      reply(c, out.finish());
      return true;
    }
  }
  return false;  // an unknown command
}

bool ServerLoop::all_set(const std::vector<std::string>& keys) const {
  for (const std::string& k : keys) {
    if (!data_.contains(k)) return false;
  }
  return true;
}

std::vector<std::string> ServerLoop::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    if (!data_.contains(k)) out.push_back(k);
  }
  return out;
}

void ServerLoop::release_waiters() {
  for (Client& c : clients_) {
    if (c.closed || !c.waiting || !all_set(c.wait_keys)) continue;
    c.waiting = false;
    MessageWriter out;
    out.u8(static_cast<uint8_t>(Status::kOk));
    reply(c, out.finish());
  }
}

void ServerLoop::expire_waiters() {
  const auto now = Clock::now();
  for (Client& c : clients_) {
    if (c.closed || !c.waiting || now < c.wait_deadline) continue;
    c.waiting = false;
    MessageWriter out;
    out.u8(static_cast<uint8_t>(Status::kTimedOut)).strs(missing(c.wait_keys));
    reply(c, out.finish());
  }
}

int ServerLoop::next_timeout_ms() const {
  int timeout = -1;
  for (const Client& c : clients_) {
    if (c.closed || !c.waiting) continue;
    const int ms = poll_timeout_ms(c.wait_deadline);
    if (timeout < 0 || ms < timeout) timeout = ms;
  }
  return timeout;
}

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port) : host_(host) {
  const std::string where = host + ":" + std::to_string(port);
  std::string error;
  const std::vector<SocketAddress> addresses = resolve(host, port, /*passive=*/true, error);
  for (const SocketAddress& a : addresses) {
    const int fd = ::socket(a.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      error = error_text(errno);
      continue;
    }
    // SO_REUSEADDR lets a restarted job bind a port whose old connections
    // linger in TIME_WAIT; on Linux it still refuses a port someone listens on.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a.storage), a.length) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
      break;
    }
    error = error_text(errno);
    ::close(fd);
  }
  KILN_CHECK(listen_fd_ >= 0, "tcp store: cannot listen on ", where, ": ", error);

  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    KILN_FAIL("tcp store: cannot create the server's stop pipe on ", where, ": ", error_text(err));
  }
  thread_ = std::thread([this] { serve(); });
}

TCPStoreServer::~TCPStoreServer() {
  const char byte = 1;
  while (::write(stop_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  ::close(stop_pipe_[0]);
  ::close(stop_pipe_[1]);
  ::close(listen_fd_);
}

void TCPStoreServer::serve() {
  // A failure here must not take the process down: rank 0 is training too.
  // Its clients see the connection close and report it.
  try {
    ServerLoop loop(listen_fd_, stop_pipe_[0]);
    loop.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln tcp store server on %s:%u stopped: %s\n", host_.c_str(), unsigned{port_}, e.what());
  }
}

}  // namespace kiln::distributed
