// FileStore: Note [File store log] (file_store.h).
#include "distributed/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>

#include "tensor/error.h"

namespace kiln::distributed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kHeader[8] = {'K', 'I', 'L', 'N', 'F', 'S', '1', '\n'};
constexpr uint8_t kSetRecord = 'S';
constexpr uint8_t kDeleteRecord = 'D';
// User keys are stored under "/"; these two counters (Note [File store log])
// are not, so no user key can clash with them.
const std::string kUserPrefix = "/";
const std::string kOpenCount = "open instances";
const std::string kCloseCount = "closed instances";

constexpr std::chrono::milliseconds kMaxPollSleep{10};

std::string error_text(int err) {
  char buffer[256];
  return std::string(::strerror_r(err, buffer, sizeof(buffer)));
}

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kYear = std::chrono::hours(24 * 365);
  return Clock::now() + std::clamp(timeout, std::chrono::milliseconds(0), kYear);
}

std::string quote(const std::string& key) { return "'" + key + "'"; }

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  return out + "]";
}

std::vector<std::string> stored(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& k : keys) out.push_back(kUserPrefix + k);
  return out;
}

void put_le32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

// The file, open and flock()ed for the lifetime of one operation; closing
// the descriptor releases the lock.
class FileStore::LockedFile {
 public:
  LockedFile(const std::string& path, bool exclusive, std::chrono::milliseconds timeout) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    KILN_CHECK(fd_ >= 0, "file store ", path, ": cannot open the file: ", error_text(errno));
    // Polled rather than blocking so that a process that stopped while
    // holding the lock costs a timeout, not a hang.
    const auto deadline = deadline_after(timeout);
    auto sleep = std::chrono::microseconds(50);
    while (::flock(fd_, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err != EWOULDBLOCK || Clock::now() >= deadline) {
        ::close(fd_);
        KILN_CHECK(err == EWOULDBLOCK, "file store ", path, ": cannot lock the file: ", error_text(err));
        KILN_FAIL("file store ", path, ": could not lock the file within ", timeout.count(),
                  " ms; another process holds the lock (a stopped or hung rank?)");
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
    }
  }
  ~LockedFile() { ::close(fd_); }
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  int fd() const { return fd_; }

  uint64_t size() const {
    struct stat st {};
    KILN_CHECK(::fstat(fd_, &st) == 0, "file store ", path_, ": cannot stat the file: ", error_text(errno));
    return static_cast<uint64_t>(st.st_size);
  }

  void read(uint8_t* data, size_t size, uint64_t offset) const {
    while (size > 0) {
      const ssize_t got = ::pread(fd_, data, size, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      KILN_CHECK(got > 0, "file store ", path_, ": cannot read at byte offset ", offset, ": ",
                 got == 0 ? std::string("unexpected end of file") : error_text(errno));
      data += got;
      size -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
  }

  // Writes all of `bytes` at `offset` or, failing, cuts the file back to
  // `offset` so that no reader meets half a record.
  void write(const std::vector<uint8_t>& bytes, uint64_t offset) const {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t put = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) {
        const int err = put < 0 ? errno : EIO;
        const bool cut = ::ftruncate(fd_, static_cast<off_t>(offset)) == 0;
        KILN_FAIL("file store ", path_, ": cannot append at byte offset ", offset, ": ", error_text(err),
                  cut ? "" : " (and cannot remove the partial record, so readers will find the file truncated)");
      }
      done += static_cast<size_t>(put);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// One per FileStore made by the public constructor, shared with its clones:
// the last of them to go counts the instance out.
struct FileStore::Membership {
  Membership(std::string path, int world_size, std::chrono::milliseconds timeout)
      : path(std::move(path)), world_size(world_size), timeout(timeout) {}
  // Each Membership counts one instance out when it goes, so there must
  // never be a copy (a temporary would count this instance out at once).
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  std::string path;
  int world_size;
  std::chrono::milliseconds timeout;

  ~Membership() {
    // A destructor must not throw; a store that cannot be counted out only
    // leaves its file behind.
    try {
      FileStore(path, world_size, timeout, nullptr).leave();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: file store %s: could not count this instance out: %s\n", path.c_str(), e.what());
    }
  }
};

FileStore::FileStore(std::string path, int world_size, std::chrono::milliseconds timeout,
                     std::shared_ptr<Membership> membership)
    : Store(timeout), path_(std::move(path)), world_size_(world_size), membership_(std::move(membership)) {}

FileStore::FileStore(std::string path, int world_size, std::chrono::milliseconds timeout)
    : FileStore(std::move(path), world_size, timeout, nullptr) {
  KILN_CHECK(world_size_ > 0 || world_size_ == -1, "file store ", path_, ": world_size must be positive, or -1 if ",
             "not known; got ", world_size_);
  {
    std::lock_guard lock(mutex_);
    LockedFile file(path_, /*exclusive=*/true, timeout_);
    add_stored(file, kOpenCount, 1, "open");
  }
  membership_ = std::make_shared<Membership>(path_, world_size_, timeout_);
}

FileStore::~FileStore() = default;

std::string FileStore::describe() const { return "file store " + path_; }

std::unique_ptr<Store> FileStore::clone() const {
  return std::unique_ptr<Store>(new FileStore(path_, world_size_, timeout_, membership_));
}

void FileStore::refresh(const LockedFile& file) {
  const uint64_t size = file.size();
  // Shorter than what we read: removed and made anew, or cut short. Read it
  // all again; a cut shows up below as a truncated record.
  if (size < offset_) {
    cache_.clear();
    offset_ = 0;
  }
  if (size == offset_) return;
  uint64_t at = offset_;
  if (at == 0) {
    uint8_t header[sizeof(kHeader)] = {};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof(header)));
    file.read(header, n, 0);
    KILN_CHECK(n == sizeof(kHeader) && std::memcmp(header, kHeader, n) == 0, describe(),
               ": not a kiln file store: the file does not start with the header \"KILNFS1\\n\" (byte offset 0, ",
               size, " bytes in the file)");
    at = sizeof(kHeader);
  }
  // bytes: (size - at) the records appended since the last refresh
  std::vector<uint8_t> bytes(static_cast<size_t>(size - at));
  file.read(bytes.data(), bytes.size(), at);
  size_t pos = 0;
  while (pos < bytes.size()) {
    const uint64_t record = at + pos;
    auto need = [&](size_t n, const char* what) {
      KILN_CHECK(bytes.size() - pos >= n, describe(), ": the record at byte offset ", record, " is truncated: its ",
                 what, " needs ", n, " bytes from byte ", at + pos, " but the file ends at byte ", size,
                 " (a writer died mid-record, or the file was cut short)");
    };
    need(5, "type and key length");
    const uint8_t type = bytes[pos];
    if (type != kSetRecord && type != kDeleteRecord) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", type);
      KILN_FAIL(describe(), ": the record at byte offset ", record, " has unknown type ", hex,
                " (expected 'S' or 'D'); the file is corrupt");
    }
    const uint32_t key_length = get_le32(&bytes[pos + 1]);
    pos += 5;
    need(key_length, "key");
    std::string key(reinterpret_cast<const char*>(bytes.data() + pos), key_length);
    pos += key_length;
    if (type == kDeleteRecord) {
      cache_.erase(key);
      continue;
    }
    need(4, "value length");
    const uint32_t value_length = get_le32(&bytes[pos]);
    pos += 4;
    need(value_length, "value");
    cache_[key].assign(bytes.begin() + static_cast<ptrdiff_t>(pos),
                       bytes.begin() + static_cast<ptrdiff_t>(pos + value_length));
    pos += value_length;
  }
  offset_ = size;
}

void FileStore::append(const LockedFile& file, const std::string& key, const std::vector<uint8_t>* value) {
  KILN_CHECK(key.size() <= UINT32_MAX && (!value || value->size() <= UINT32_MAX), describe(), ": key '", key,
             "' or its value is longer than 4 GiB");
  std::vector<uint8_t> bytes;
  // refresh() has just read to the end, and the exclusive lock keeps it there.
  const uint64_t at = offset_;
  if (at == 0) bytes.assign(kHeader, kHeader + sizeof(kHeader));
  bytes.push_back(value ? kSetRecord : kDeleteRecord);
  put_le32(bytes, static_cast<uint32_t>(key.size()));
  bytes.insert(bytes.end(), key.begin(), key.end());
  if (value) {
    put_le32(bytes, static_cast<uint32_t>(value->size()));
    bytes.insert(bytes.end(), value->begin(), value->end());
  }
  file.write(bytes, at);
  if (value) {
    cache_[key] = *value;
  } else {
    cache_.erase(key);
  }
  offset_ = at + bytes.size();
}

int64_t FileStore::add_stored(const LockedFile& file, const std::string& key, int64_t delta, const std::string& op) {
  refresh(file);
  int64_t value = 0;
  const auto it = cache_.find(key);
  if (it != cache_.end()) {
    const char* first = reinterpret_cast<const char*>(it->second.data());
    const char* last = first + it->second.size();
    const auto parsed = std::from_chars(first, last, value);
    KILN_CHECK(parsed.ec == std::errc() && parsed.ptr == last, describe(), ": ", op, ": its value '",
               std::string(first, std::min<size_t>(it->second.size(), 64)), "' is not an integer");
  }
  KILN_CHECK(!__builtin_add_overflow(value, delta, &value), describe(), ": ", op, ": adding ", delta,
             " overflows int64");
  const std::string text = std::to_string(value);
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  append(file, key, &bytes);
  return value;
}

bool FileStore::all_cached(const std::vector<std::string>& stored_keys) const {
  return std::all_of(stored_keys.begin(), stored_keys.end(), [&](const std::string& k) { return cache_.contains(k); });
}

bool FileStore::wait_stored(const std::vector<std::string>& stored_keys, std::chrono::milliseconds timeout,
                            std::unique_lock<std::mutex>& lock) {
  const auto deadline = deadline_after(timeout);
  auto sleep = std::chrono::milliseconds(1);
  while (true) {
    lock.lock();
    {
      LockedFile file(path_, /*exclusive=*/false, timeout_);
      refresh(file);
    }
    if (all_cached(stored_keys)) return true;
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return false;
    // Sleep without the mutex, so that this instance's other users (a
    // thread that will set the key, say) are not held up.
    lock.unlock();
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, left));
    sleep = std::min(sleep * 2, kMaxPollSleep);
  }
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  std::lock_guard lock(mutex_);
  LockedFile file(path_, /*exclusive=*/true, timeout_);
  refresh(file);
  append(file, kUserPrefix + key, &value);
}

std::vector<uint8_t> FileStore::get(const std::string& key) {
  std::unique_lock lock(mutex_, std::defer_lock);
  KILN_CHECK(wait_stored({kUserPrefix + key}, timeout_, lock), describe(), ": get(", quote(key), ") timed out after ",
             timeout_.count(), " ms");
  return cache_.at(kUserPrefix + key);
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::lock_guard lock(mutex_);
  LockedFile file(path_, /*exclusive=*/true, timeout_);
  return add_stored(file, kUserPrefix + key, delta, "add(" + quote(key) + ", " + std::to_string(delta) + ")");
}

std::vector<uint8_t> FileStore::compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                            const std::vector<uint8_t>& desired) {
  std::lock_guard lock(mutex_);
  LockedFile file(path_, /*exclusive=*/true, timeout_);
  refresh(file);
  const std::string k = kUserPrefix + key;
  const auto it = cache_.find(k);
  const bool matches = it == cache_.end() ? expected.empty() : it->second == expected;
  if (matches) append(file, k, &desired);
  const auto now = cache_.find(k);
  return now == cache_.end() ? std::vector<uint8_t>{} : now->second;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_, std::defer_lock);
  if (wait_stored(stored(keys), timeout, lock)) return;
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!cache_.contains(kUserPrefix + k)) missing.push_back(k);
  }
  KILN_FAIL(describe(), ": wait(", quote_keys(keys), ") timed out after ", timeout.count(),
            " ms; still missing: ", quote_keys(missing));
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  LockedFile file(path_, /*exclusive=*/false, timeout_);
  refresh(file);
  return all_cached(stored(keys));
}

bool FileStore::delete_key(const std::string& key) {
  std::lock_guard lock(mutex_);
  LockedFile file(path_, /*exclusive=*/true, timeout_);
  refresh(file);
  const std::string k = kUserPrefix + key;
  if (!cache_.contains(k)) return false;
  append(file, k, nullptr);
  return true;
}

int64_t FileStore::num_keys() {
  std::lock_guard lock(mutex_);
  LockedFile file(path_, /*exclusive=*/false, timeout_);
  refresh(file);
  return std::count_if(cache_.begin(), cache_.end(),
                       [](const auto& entry) { return entry.first.starts_with(kUserPrefix); });
}

void FileStore::leave() {
  // Removed already (by a cleanup script, say): opening would create it anew.
  if (::access(path_.c_str(), F_OK) != 0) return;
  std::lock_guard lock(mutex_);
  LockedFile file(path_, /*exclusive=*/true, timeout_);
  const int64_t closed = add_stored(file, kCloseCount, 1, "close");
  const int64_t open = add_stored(file, kOpenCount, -1, "close");
  // Removed under the lock, so that no instance reads between the count
  // reaching 0 and the removal.
  if (open == 0 && world_size_ > 0 && closed >= world_size_) ::unlink(path_.c_str());
}

}  // namespace kiln::distributed
