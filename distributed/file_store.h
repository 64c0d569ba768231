// FileStore: a Store (Note [Store]) kept in one file that every process of
// the job can reach (a local file for one machine, a shared file system for
// several). No server: whoever touches the file locks it.
//
//   FileStore store("/shared/job42/store", /*world_size=*/4);
//   store.set("rank2/addr", "10.0.0.3:5002");
//   store.wait({"rank0/addr", "rank1/addr"});
//
// Note [File store log]
// The file is an append-only log: an 8-byte header "KILNFS1\n", then
// records, each a type byte ('S' set, 'D' delete), a 4-byte little-endian key
// length and the key, and for 'S' a 4-byte value length and the value. Every
// operation opens the file, takes flock() (shared to read, exclusive to
// write), reads the records appended since this instance last looked into
// its cache, and for a write appends one record. So add() and compare_set()
// are atomic across processes: they read and append under one exclusive
// lock. get() and wait() poll, sleeping 1 ms and then up to 10 ms between
// looks, until the keys are set or the timeout passes.
//
// The log also holds two counters users do not see (user keys are stored
// under "/", these are not): how many FileStore instances are open, and how
// many have closed. Like PyTorch's FileStore, the instance whose close
// brings the open count to 0 after at least `world_size` closes removes the
// file, so a job leaves nothing behind, yet a rank that finishes before the
// last one has even opened the store does not remove it from under them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/store.h"

namespace kiln::distributed {

class FileStore : public Store {
 public:
  // Opens (creating if needed) the store at `path`; its directory must
  // exist. `world_size`: how many processes will open the store, or -1 if
  // not known (the file is then never removed). Throws kiln::Error naming
  // the file if it cannot be opened or is not a well-formed store log.
  FileStore(std::string path, int world_size, std::chrono::milliseconds timeout = kDefaultTimeout);
  ~FileStore() override;

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
  // A clone reads and writes the same file but counts as the same instance:
  // the file is removed only after the original and all its clones close.
  std::unique_ptr<Store> clone() const override;
  std::string describe() const override;  // "file store PATH"

  const std::string& path() const { return path_; }

 private:
  struct Membership;
  class LockedFile;
  FileStore(std::string path, int world_size, std::chrono::milliseconds timeout,
            std::shared_ptr<Membership> membership);

  // Reads the records appended since the last call into cache_.
  void refresh(const LockedFile& file);
  // Appends a set (value != nullptr) or delete record and applies it to cache_.
  void append(const LockedFile& file, const std::string& key, const std::vector<uint8_t>* value);
  // add() on a key as stored (user keys with their "/" prefix).
  int64_t add_stored(const LockedFile& file, const std::string& key, int64_t delta, const std::string& op);
  // Polls until every stored key is set; false if `timeout` passes first.
  // Returns with mutex_ held and cache_ fresh on success.
  bool wait_stored(const std::vector<std::string>& stored_keys, std::chrono::milliseconds timeout,
                   std::unique_lock<std::mutex>& lock);
  // True if every stored key is in cache_.
  bool all_cached(const std::vector<std::string>& stored_keys) const;
  // Counts this instance out and removes the file if it is the last.
  void leave();

  std::string path_;
  int world_size_;
  std::mutex mutex_;  // guards offset_ and cache_; one operation at a time
  uint64_t offset_ = 0;
  std::map<std::string, std::vector<uint8_t>> cache_;  // the file's keys, up to offset_
  std::shared_ptr<Membership> membership_;
};

}  // namespace kiln::distributed
