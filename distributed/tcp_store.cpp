// TCPStore: the client side of Note [TCP store protocol] (tcp_store.h).
#include "distributed/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "distributed/tcp_store_protocol.h"
#include "tensor/error.h"

namespace kiln::distributed {

namespace tcp_store_protocol {

std::vector<SocketAddress> resolve(const std::string& host, uint16_t port, bool passive, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    error = rc == EAI_SYSTEM ? error_text(errno) : std::string(::gai_strerror(rc));
    return {};
  }
  std::vector<SocketAddress> out;
  for (const addrinfo* a = list; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    SocketAddress s;
    std::memcpy(&s.storage, a->ai_addr, a->ai_addrlen);
    s.length = a->ai_addrlen;
    s.family = a->ai_family;
    out.push_back(s);
  }
  ::freeaddrinfo(list);
  std::stable_partition(out.begin(), out.end(), [](const SocketAddress& s) { return s.family == AF_INET; });
  if (out.empty()) error = "no IPv4 or IPv6 address";
  return out;
}

// The numeric address of a connected socket's own end, "" if unknown.
std::string local_address_of(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  char text[NI_MAXHOST] = {};
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, text, sizeof(text), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return "";
  }
  return text;
}

std::string error_text(int err) {
  char buffer[256];
  // The GNU strerror_r returns its message, which need not be in `buffer`.
  return std::string(::strerror_r(err, buffer, sizeof(buffer)));
}

int poll_timeout_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kYear = std::chrono::hours(24 * 365);
  return std::chrono::steady_clock::now() + std::clamp(timeout, std::chrono::milliseconds(0), kYear);
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  return out + "]";
}

}  // namespace tcp_store_protocol

using namespace tcp_store_protocol;
using Clock = std::chrono::steady_clock;

namespace {

// How long past a WAIT's own timeout the client listens for the server's
// "timed out" reply before it decides the server has stopped answering.
constexpr std::chrono::milliseconds kWaitReplyGrace{1000};

enum class Io { kDone, kTimedOut, kClosed };

Io send_all(int fd, const uint8_t* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    const ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL);
    if (sent >= 0) {
      data += sent;
      size -= static_cast<size_t>(sent);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::kClosed;
    pollfd p{fd, POLLOUT, 0};
    const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n == 0) return Io::kTimedOut;
    if (n < 0 && errno != EINTR) return Io::kClosed;
  }
  return Io::kDone;
}

Io recv_all(int fd, uint8_t* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    const ssize_t got = ::recv(fd, data, size, 0);
    if (got > 0) {
      data += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::kClosed;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n == 0) return Io::kTimedOut;
    if (n < 0 && errno != EINTR) return Io::kClosed;
  }
  return Io::kDone;
}

std::string quote(const std::string& key) { return "'" + key + "'"; }

// Where a client connects to reach a server listening on `host`.
std::string client_host(const std::string& host) {
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

}  // namespace

struct TCPStore::Reply {
  Status status = Status::kOk;
  std::vector<uint8_t> body;  // after the status byte
  MessageReader fields() const { return MessageReader(body.data(), body.size()); }
};

TCPStore::TCPStore(std::string host, uint16_t port, std::chrono::milliseconds timeout)
    : Store(timeout), host_(std::move(host)), port_(port) {
  KILN_CHECK(port_ != 0, "tcp store: a client needs the server's port, not 0 (host '", host_, "')");
  std::lock_guard lock(mutex_);
  connect_to_server(timeout_);
}

TCPStore::~TCPStore() { close_connection(); }

std::shared_ptr<TCPStore> TCPStore::serve(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  auto server = std::make_shared<TCPStoreServer>(host, port);
  auto store = std::make_shared<TCPStore>(client_host(host), server->port(), timeout);
  store->server_ = std::move(server);
  return store;
}

std::string TCPStore::describe() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return "tcp store at " + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

void TCPStore::close_connection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TCPStore::connect_to_server(std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::chrono::milliseconds backoff{10};
  std::string last_error = "no attempt finished";
  while (true) {
    const std::vector<SocketAddress> addresses = resolve(host_, port_, /*passive=*/false, last_error);
    for (const SocketAddress& a : addresses) {
      const int fd = ::socket(a.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) {
        last_error = error_text(errno);
        continue;
      }
      int err = 0;
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.storage), a.length) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
          pollfd p{fd, POLLOUT, 0};
          int n;
          while ((n = ::poll(&p, 1, poll_timeout_ms(deadline))) < 0 && errno == EINTR) {
          }
          socklen_t length = sizeof(err);
          if (n == 1) {
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &length);
          } else {
            err = ETIMEDOUT;
          }
        }
      }
      if (err == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fd_ = fd;
        local_address_ = local_address_of(fd);
        break;
      }
      last_error = error_text(err);
      ::close(fd);
    }
    if (fd_ >= 0) break;
    const auto left = deadline - Clock::now();
    KILN_CHECK(left > Clock::duration::zero(), "tcp store: could not connect to ", host_, ":", port_, " within ",
               timeout.count(), " ms: ", last_error);
    // The server may not have started yet: try again, a little less often
    // each time.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
  // Check that a kiln store answers, not some other service on that port.
  MessageWriter ping;
  ping.u8(static_cast<uint8_t>(Command::kPing)).i64(kPingMagic);
  // A live server answers within microseconds; the floor keeps a connect
  // that used up the timeout from failing the greeting for want of time.
  const auto left = std::max(std::chrono::milliseconds(poll_timeout_ms(deadline)), std::chrono::milliseconds(100));
  Reply reply = round_trip(ping.finish(), "connect", left);
  int64_t magic = 0;
  MessageReader fields = reply.fields();
  KILN_CHECK(fields.i64(magic) && magic == kPingMagic, describe(),
             ": the server did not answer the store's greeting; is a kiln tcp store listening on that port?");
}

TCPStore::Reply TCPStore::round_trip(const std::vector<uint8_t>& request, const std::string& op,
                                     std::chrono::milliseconds limit) {
  KILN_CHECK(lost_during_.empty(), describe(), ": ", op, ": the server closed the connection earlier, during ",
             lost_during_, " (the process serving it — rank 0 or the launcher — may have exited)");
  KILN_CHECK(request.size() - 4 <= kMaxTcpStoreMessageBytes, describe(), ": ", op, ": the request is ",
             request.size() - 4, " bytes, more than the store's limit of ", kMaxTcpStoreMessageBytes, " bytes");
  // A connection dropped after a client-side timeout is opened again.
  if (fd_ < 0) connect_to_server(timeout_);
  const auto deadline = deadline_after(limit);
  auto fail = [&](Io io) {
    if (io == Io::kClosed) {
      close_connection();
      lost_during_ = op;
      KILN_FAIL(describe(), " closed the connection during ", op,
                " (the process serving it — rank 0 or the launcher — may have exited)");
    }
    // The reply may still come; the connection is out of step, so drop it.
    close_connection();
    KILN_FAIL(describe(), ": ", op, " timed out after ", limit.count(), " ms (the server did not answer)");
  };
  Io io = send_all(fd_, request.data(), request.size(), deadline);
  if (io != Io::kDone) fail(io);
  uint8_t header[4];
  io = recv_all(fd_, header, sizeof(header), deadline);
  if (io != Io::kDone) fail(io);
  const uint32_t length = read_le32(header);
  if (length == 0 || length > kMaxTcpStoreMessageBytes) {
    close_connection();
    lost_during_ = op;
    KILN_FAIL(describe(), ": ", op, ": the server sent a malformed reply (", length,
              " bytes); is a kiln tcp store listening on that port?");
  }
  std::vector<uint8_t> message(length);
  io = recv_all(fd_, message.data(), length, deadline);
  if (io != Io::kDone) fail(io);
  Reply reply;
  reply.status = static_cast<Status>(message[0]);
  reply.body.assign(message.begin() + 1, message.end());
  if (reply.status == Status::kError) {
    std::string text;
    MessageReader fields = reply.fields();
    fields.str(text);
    KILN_FAIL(describe(), ": ", op, ": ", text);
  }
  return reply;
}

bool TCPStore::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                        const std::string& op, std::vector<std::string>& missing) {
  MessageWriter request;
  request.u8(static_cast<uint8_t>(Command::kWait)).strs(keys).i64(timeout.count());
  const Reply reply = round_trip(request.finish(), op, timeout + kWaitReplyGrace);
  if (reply.status == Status::kOk) return true;
  MessageReader fields = reply.fields();
  fields.strs(missing);
  return false;
}

void TCPStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::lock_guard lock(mutex_);
  MessageWriter request;
  request.u8(static_cast<uint8_t>(Command::kSet)).str(key).bytes(value);
  round_trip(request.finish(), "set(" + quote(key) + ")", timeout_);
}

std::vector<uint8_t> TCPStore::get(const std::string& key) {
  std::lock_guard lock(mutex_);
  const std::string op = "get(" + quote(key) + ")";
  const auto deadline = deadline_after(timeout_);
  std::vector<std::string> missing;
  while (true) {
    // A key deleted between the WAIT and the GET sends us back to waiting.
    const auto left = std::chrono::milliseconds(poll_timeout_ms(deadline));
    KILN_CHECK(wait_for({key}, left, op, missing), describe(), ": ", op, " timed out after ", timeout_.count(),
               " ms");
    MessageWriter request;
    request.u8(static_cast<uint8_t>(Command::kGet)).str(key);
    const Reply reply = round_trip(request.finish(), op, timeout_);
    MessageReader fields = reply.fields();
    uint8_t present = 0;
    std::vector<uint8_t> value;
    KILN_CHECK(fields.u8(present) && fields.bytes(value), describe(), ": ", op, ": malformed reply");
    if (present) return value;
  }
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  std::lock_guard lock(mutex_);
  const std::string op = "add(" + quote(key) + ", " + std::to_string(delta) + ")";
  MessageWriter request;
  request.u8(static_cast<uint8_t>(Command::kAdd)).str(key).i64(delta);
  const Reply reply = round_trip(request.finish(), op, timeout_);
  MessageReader fields = reply.fields();
  int64_t value = 0;
  KILN_CHECK(fields.i64(value), describe(), ": ", op, ": malformed reply");
  return value;
}

std::vector<uint8_t> TCPStore::compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  std::lock_guard lock(mutex_);
  const std::string op = "compare_set(" + quote(key) + ")";
  MessageWriter request;
  request.u8(static_cast<uint8_t>(Command::kCompareSet)).str(key).bytes(expected).bytes(desired);
  const Reply reply = round_trip(request.finish(), op, timeout_);
  MessageReader fields = reply.fields();
  std::vector<uint8_t> value;
  KILN_CHECK(fields.bytes(value), describe(), ": ", op, ": malformed reply");
  return value;
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  const std::string op = "wait(" + quote_keys(keys) + ")";
  std::vector<std::string> missing;
  KILN_CHECK(wait_for(keys, timeout, op, missing), describe(), ": ", op, " timed out after ", timeout.count(),
             " ms; still missing: ", quote_keys(missing));
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  const std::string op = "check(" + quote_keys(keys) + ")";
  MessageWriter request;
  request.u8(static_cast<uint8_t>(Command::kCheck)).strs(keys);
  const Reply reply = round_trip(request.finish(), op, timeout_);
  MessageReader fields = reply.fields();
  uint8_t all_set = 0;
  KILN_CHECK(fields.u8(all_set), describe(), ": ", op, ": malformed reply");
  return all_set != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  std::lock_guard lock(mutex_);
  const std::string op = "delete_key(" + quote(key) + ")";
  MessageWriter request;
  request.u8(static_cast<uint8_t>(Command::kDelete)).str(key);
  const Reply reply = round_trip(request.finish(), op, timeout_);
  MessageReader fields = reply.fields();
  uint8_t was_set = 0;
  KILN_CHECK(fields.u8(was_set), describe(), ": ", op, ": malformed reply");
  return was_set != 0;
}

int64_t TCPStore::num_keys() {
  std::lock_guard lock(mutex_);
  MessageWriter request;
  request.u8(static_cast<uint8_t>(Command::kNumKeys));
  const Reply reply = round_trip(request.finish(), "num_keys()", timeout_);
  MessageReader fields = reply.fields();
  int64_t count = 0;
  KILN_CHECK(fields.i64(count), describe(), ": num_keys(): malformed reply");
  return count;
}

std::unique_ptr<Store> TCPStore::clone() const {
  auto copy = std::make_unique<TCPStore>(host_, port_, timeout_);
  copy->server_ = server_;
  return copy;
}

}  // namespace kiln::distributed
