// TCPStore: a Store (Note [Store]) served over TCP by one thread.
//
// One process (rank 0, or the kiln-run launcher) runs a TCPStoreServer;
// every rank, that process included, connects to it with a TCPStore client.
//
//   auto store = TCPStore::serve("0.0.0.0", 29500);           // on rank 0
//   TCPStore store("10.0.0.1", 29500);                         // on the others
//   store.set("rank1/addr", "10.0.0.2:5001");
//
// Note [TCP store protocol]
// Every request and every reply is one message: a 4-byte little-endian
// length, then that many bytes. A request's first byte is its command; a
// reply's first byte is its status (ok, timed out, error). Strings and byte
// values inside are again a 4-byte length and the bytes; integers are 8
// bytes, little-endian. No message may exceed kMaxTcpStoreMessageBytes: the
// server reads lengths from the network, so it checks every one against the
// message it is in and closes the connection of a client that sends a
// malformed or oversized message, without disturbing the others.
//
// The server answers each client's requests in order, one at a time. WAIT
// is the one request it may hold: it keeps the reply back until every key is
// set, or until the timeout the request carries has passed, and then
// replies "timed out" itself with the keys still missing. So a client that
// gives up waiting leaves the connection in step, and get() is a WAIT
// followed by a non-blocking GET. The client also bounds each of its own
// waits (a little past the server's, for a server that stopped answering);
// if that bound passes first it drops the connection and opens a new one on
// the next request. A connection the server closed is not reopened: the
// server's keys are gone with it, so every later request fails at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/store.h"

namespace kiln::distributed {

// The largest request or reply (a key and a value with their framing).
inline constexpr uint32_t kMaxTcpStoreMessageBytes = 64u << 20;

// The server side: binds and listens on construction, serves any number of
// clients from one thread with poll(), and stops that thread and closes
// every connection on destruction (clients then see "closed the
// connection"). Port 0 picks a free port; port() says which.
// Throws kiln::Error "tcp store: cannot listen on HOST:PORT: <reason>" when
// the port is taken or the host does not resolve.
class TCPStoreServer {
 public:
  TCPStoreServer(const std::string& host, uint16_t port);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  void serve();

  std::string host_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};  // the destructor writes to [1]; poll() watches [0]
  std::thread thread_;
};

// A client of a TCPStoreServer. It serves one request at a time (a mutex);
// a thread that must not wait behind another uses clone(), a new connection.
class TCPStore : public Store {
 public:
  // Connects to HOST:PORT, retrying until `timeout` (the server may start
  // after its clients). HOST is an IPv4 or IPv6 literal or a name.
  TCPStore(std::string host, uint16_t port, std::chrono::milliseconds timeout = kDefaultTimeout);
  ~TCPStore() override;

  // Starts a server on HOST:PORT (port 0: any free port) and returns a
  // client connected to it. The server lives as long as this store or any
  // of its clones: rank 0 keeps serving while any of its threads still
  // holds a client, and stops when the last one goes.
  static std::shared_ptr<TCPStore> serve(const std::string& host, uint16_t port,
                                         std::chrono::milliseconds timeout = kDefaultTimeout);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  using Store::set;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<uint8_t> compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                   const std::vector<uint8_t>& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  std::unique_ptr<Store> clone() const override;
  std::string describe() const override;  // "tcp store at HOST:PORT"

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  // This end's address of the connection to the server ("10.0.0.2",
  // "::1"): the address through which this host reaches the store's, which
  // the Gloo backend listens on (Note [Gloo interface]).
  const std::string& local_address() const { return local_address_; }

 private:
  struct Reply;
  // Sends `request` and returns the reply, within `limit`. `op` names the
  // call in errors, e.g. "get('rank1/addr')".
  Reply round_trip(const std::vector<uint8_t>& request, const std::string& op, std::chrono::milliseconds limit);
  // Sends WAIT for `keys`; false if the server replied that `timeout` passed
  // (then `missing` holds the keys that were still unset).
  bool wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout, const std::string& op,
                std::vector<std::string>& missing);
  void connect_to_server(std::chrono::milliseconds timeout);
  void close_connection();

  std::string host_;
  uint16_t port_;
  std::shared_ptr<TCPStoreServer> server_;  // set by serve() and shared with clones
  std::mutex mutex_;                        // one request at a time
  int fd_ = -1;
  std::string local_address_;
  std::string lost_during_;  // the request during which the server closed the connection
};

}  // namespace kiln::distributed
