// The TCP store's messages (Note [TCP store protocol] in tcp_store.h) and
// the socket helpers its server and client share. Internal to
// tcp_store.cpp and tcp_store_server.cpp.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::distributed::tcp_store_protocol {

enum class Command : uint8_t {
  kSet = 1,         // key, value                    -> ok
  kGet = 2,         // key                           -> ok, present (u8), value
  kAdd = 3,         // key, delta (i64)              -> ok, new value (i64) | error, message
  kCompareSet = 4,  // key, expected, desired        -> ok, value after the call
  kWait = 5,        // count (u32), keys, timeout ms -> ok | timed out, count, missing keys
  kCheck = 6,       // count (u32), keys             -> ok, all set (u8)
  kDelete = 7,      // key                           -> ok, was set (u8)
  kNumKeys = 8,     //                               -> ok, count (i64)
  kPing = 9,        // kPingMagic (i64)              -> ok, kPingMagic
};

enum class Status : uint8_t { kOk = 0, kTimedOut = 1, kError = 2 };

// Sent and echoed on every new connection, so that a client pointed at some
// other service's port fails with a clear error instead of misreading it.
inline constexpr int64_t kPingMagic = 0x4b494c4e53544f52;  // "KILNSTOR"

// Builds one framed message: the length is filled in by finish().
class MessageWriter {
 public:
  MessageWriter() : bytes_(4, 0) {}
  MessageWriter& u8(uint8_t v) {
    bytes_.push_back(v);
    return *this;
  }
  MessageWriter& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  MessageWriter& i64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(u >> (8 * i)));
    return *this;
  }
  MessageWriter& bytes(const uint8_t* data, size_t n) {
    u32(static_cast<uint32_t>(n));
    bytes_.insert(bytes_.end(), data, data + n);
    return *this;
  }
  MessageWriter& bytes(const std::vector<uint8_t>& v) { return bytes(v.data(), v.size()); }
  MessageWriter& str(const std::string& s) { return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  MessageWriter& strs(const std::vector<std::string>& ss) {
    u32(static_cast<uint32_t>(ss.size()));
    for (const std::string& s : ss) str(s);
    return *this;
  }
  // The whole message, length prefix included.
  std::vector<uint8_t> finish() {
    const auto n = static_cast<uint32_t>(bytes_.size() - 4);
    for (int i = 0; i < 4; ++i) bytes_[i] = static_cast<uint8_t>(n >> (8 * i));
    return std::move(bytes_);
  }

 private:
  std::vector<uint8_t> bytes_;
};

inline uint32_t read_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// Reads the fields of one message body. Every read checks the bytes left
// first and returns false instead of reading past the end: lengths come
// from the network.
class MessageReader {
 public:
  MessageReader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  bool u8(uint8_t& v) {
    if (left_ < 1) return false;
    v = *p_;
    advance(1);
    return true;
  }
  bool u32(uint32_t& v) {
    if (left_ < 4) return false;
    v = read_le32(p_);
    advance(4);
    return true;
  }
  bool i64(int64_t& v) {
    if (left_ < 8) return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= uint64_t(p_[i]) << (8 * i);
    v = static_cast<int64_t>(u);
    advance(8);
    return true;
  }
  bool bytes(std::vector<uint8_t>& v) {
    uint32_t n = 0;
    if (!u32(n) || n > left_) return false;
    v.assign(p_, p_ + n);
    advance(n);
    return true;
  }
  bool str(std::string& s) {
    uint32_t n = 0;
    if (!u32(n) || n > left_) return false;
    s.assign(reinterpret_cast<const char*>(p_), n);
    advance(n);
    return true;
  }
  bool strs(std::vector<std::string>& ss) {
    uint32_t n = 0;
    if (!u32(n)) return false;
    ss.clear();
    // Each string takes at least its 4-byte length, so a count the message
    // cannot hold fails on the first missing string, before any large
    // allocation.
    for (uint32_t i = 0; i < n; ++i) {
      std::string s;
      if (!str(s)) return false;
      ss.push_back(std::move(s));
    }
    return true;
  }
  bool at_end() const { return left_ == 0; }

 private:
  void advance(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  size_t left_;
};

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = 0;
};

// HOST:PORT's addresses, IPv4 first (so that "localhost" means 127.0.0.1 to
// a server and its clients alike). `passive` asks for addresses to listen
// on; an empty host then means every interface. On failure returns none
// and sets `error`.
std::vector<SocketAddress> resolve(const std::string& host, uint16_t port, bool passive, std::string& error);

// strerror(err) as a std::string.
std::string error_text(int err);

// Milliseconds from now until `deadline`, rounded up, at least 0; for poll().
int poll_timeout_ms(std::chrono::steady_clock::time_point deadline);

// now + timeout, with timeouts beyond a year cut to a year so that
// kDefaultTimeout-like sentinels such as milliseconds::max() cannot overflow.
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout);

// "['a', 'b']" for error messages.
std::string quote_keys(const std::vector<std::string>& keys);

}  // namespace kiln::distributed::tcp_store_protocol
