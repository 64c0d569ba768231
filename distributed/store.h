// Store: the small key-value service that processes of one job meet through.
//
// Note [Store]
// Before processes can talk over Gloo, NCCL or MPI they must find each other:
// each publishes its address (or NCCL's unique id) under a key and reads the
// others'. That is rendezvous, and the Store is where it happens. After
// rendezvous the same store carries small metadata the distributed runtime
// needs while training: each rank's progress through its collectives (Note
// [Collective progress]) and, in debug mode, each rank's description of the
// collective it is about to run (Note [Collective fingerprints]).
//
// Two implementations:
// - TCPStore (tcp_store.h): a server thread, in rank 0 or in the kiln-run
//   launcher, holds the map; every rank connects to it as a client.
// - FileStore (file_store.h): an append-only file on a file system all ranks
//   share, locked with flock(); no server at all.
// PrefixStore puts a group's keys under "<prefix>/" so that sub-groups made
// by new_group() share one store without clashing.
//
// Values are bytes. Counters made by add() are stored as decimal text, so
// get() on a counter returns e.g. "3". Every blocking call has a timeout and
// throws kiln::Error naming the store, the key(s) and the timeout when it
// passes; nothing waits forever.
//
//   auto store = std::make_shared<FileStore>("/tmp/job1/store", /*world_size=*/2);
//   store->set("rank0/addr", "10.0.0.1:5000");
//   std::string peer = store->get_string("rank1/addr");  // blocks until set
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::distributed {

// The default for stores and process groups: long enough for a slow
// rendezvous or a long first collective, short enough to end a hung job.
inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);
// How long a rank may be silent (no heartbeat, Note [Heartbeat]) before the
// ranks waiting for it name it, while the collective timeout still allows
// slow but live ranks their full time.
inline constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout = std::chrono::seconds(10);

class Store {
 public:
  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sets `key` to `value`, replacing any earlier value, and wakes waiters.
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;

  // The value of `key`, waiting up to timeout() for it to be set.
  virtual std::vector<uint8_t> get(const std::string& key) = 0;

  // Adds `delta` to the counter at `key` (a missing key counts as 0) and
  // returns the new value, atomically across all clients.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // Sets `key` to `desired` if its value equals `expected` (an empty
  // `expected` matches a missing key); returns the value `key` holds after
  // the call, so the caller won iff the result equals `desired`.
  virtual std::vector<uint8_t> compare_set(const std::string& key,
                                           const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) = 0;

  // Waits until every key in `keys` is set, up to `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  // True if every key in `keys` is set now; never waits.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Removes `key`; returns whether it was set.
  virtual bool delete_key(const std::string& key) = 0;

  // How many keys are set.
  virtual int64_t num_keys() = 0;

  // A second client of the same store, for another thread: a client serves
  // one request at a time, and a thread blocked in get() must not hold up a
  // thread that only wants to set a key.
  virtual std::unique_ptr<Store> clone() const = 0;

  // How the store describes itself in error messages ("tcp store at
  // 127.0.0.1:29500", "file store /tmp/x").
  virtual std::string describe() const = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // String conveniences over the byte interface.
  void set(const std::string& key, const std::string& value);
  std::string get_string(const std::string& key);

 protected:
  std::chrono::milliseconds timeout_;
};

// Every key of `base` under "<prefix>/". Clones share the prefix.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

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
  std::string describe() const override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace kiln::distributed
