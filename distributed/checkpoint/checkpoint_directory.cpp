// The directory side of a save (Note [Sharded checkpoint layout] in
// sharded_checkpoint.h): a temporary sibling directory that is moved over
// the checkpoint's directory in one step once everything is written.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "distributed/checkpoint/checkpoint_files.h"
#include "tensor/atomic_file.h"

namespace kiln::distributed::checkpoint::detail {

namespace fs = std::filesystem;

namespace {

constexpr size_t kIdDigits = 16;

// Flushes a directory's entries (the files created or renamed in it).
void fsync_directory(const std::string& dir, const char* op) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  KILN_CHECK(fd.get() >= 0, op, ": cannot open directory '", dir, "' to flush it: ", errno_text(errno));
  KILN_CHECK(::fsync(fd.get()) == 0, op, ": cannot flush directory '", dir, "': ", errno_text(errno));
}

std::string parent_of(const std::string& dir) {
  fs::path parent = fs::path(dir).parent_path();
  return parent.empty() ? "." : parent.string();
}

bool is_id(std::string_view text) {
  return text.size() == kIdDigits && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace

std::string normalize_dir(const std::string& dir, const char* op) {
  KILN_CHECK(!dir.empty(), op, ": the checkpoint directory is empty");
  fs::path path = fs::path(dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();  // "ckpt/" names "ckpt"
  const std::string name = path.filename().string();
  KILN_CHECK(!name.empty() && name != "." && name != "..", op, ": '", dir,
             "' does not name a directory of its own (give it a name, e.g. 'checkpoints/step-100')");
  return path.string();
}

std::string new_checkpoint_id() {
  std::random_device device;
  uint64_t id = (static_cast<uint64_t>(device()) << 32) ^ device();
  id ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull;
  id ^= static_cast<uint64_t>(::getpid()) << 17;
  char text[kIdDigits + 1];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::string temp_dir_for(const std::string& dir, const std::string& id) { return dir + ".tmp." + id; }

void begin_save(const std::string& dir, const std::string& temp, const char* op) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(dir, error);
  if (fs::exists(status)) {
    KILN_CHECK(!fs::is_symlink(status), op, ": '", dir,
               "' is a symbolic link; a save replaces the directory itself, so give the real path");
    KILN_CHECK(fs::is_directory(status), op, ": '", dir, "' exists and is not a directory");
    const bool empty = fs::is_empty(dir, error);
    KILN_CHECK(empty || is_sharded_checkpoint(dir), op, ": '", dir,
               "' exists and is neither empty nor a sharded checkpoint (it has no ", kIndexFile,
               "); a save replaces only a checkpoint, so choose another directory or remove it");
  }
  // Temporary directories of saves to `dir` that were killed.
  const std::string prefix = fs::path(dir).filename().string() + ".tmp.";
  for (const auto& entry : fs::directory_iterator(parent_of(dir), error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix) && is_id(std::string_view(name).substr(prefix.size()))) {
      fs::remove_all(entry.path(), error);
    }
  }
  fs::create_directories(parent_of(dir), error);
  KILN_CHECK(!error, op, ": cannot create directory '", parent_of(dir), "': ", error.message());
  KILN_CHECK(fs::create_directory(temp, error) && !error, op, ": cannot create directory '", temp,
             "': ", error ? error.message() : "it exists already");
}

void commit_save(const std::string& temp, const std::string& dir, const char* op) {
  fsync_directory(temp, op);
  std::error_code error;
  if (!fs::exists(fs::symlink_status(dir, error))) {
    KILN_CHECK(::rename(temp.c_str(), dir.c_str()) == 0, op, ": cannot rename '", temp, "' to '", dir,
               "': ", errno_text(errno));
  } else if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(temp, error);  // the old checkpoint, now under the temporary name
  } else {
    const int exchange_error = errno;
    KILN_CHECK(exchange_error == EINVAL || exchange_error == ENOSYS || exchange_error == ENOTSUP, op, ": cannot swap '",
               temp, "' with '", dir, "': ", errno_text(exchange_error));
    // No RENAME_EXCHANGE on this filesystem: two renames, and a short window
    // in which only "<dir>.old.<id>" holds a checkpoint.
    const std::string old = dir + ".old." + temp.substr(temp.size() - kIdDigits);
    KILN_CHECK(::rename(dir.c_str(), old.c_str()) == 0, op, ": cannot rename '", dir, "' to '", old,
               "': ", errno_text(errno));
    if (::rename(temp.c_str(), dir.c_str()) != 0) {
      const int rename_error = errno;
      ::rename(old.c_str(), dir.c_str());
      KILN_FAIL(op, ": cannot rename '", temp, "' to '", dir, "': ", errno_text(rename_error));
    }
    fs::remove_all(old, error);
  }
  fsync_directory(parent_of(dir), op);
}

void remove_temp(const std::string& temp) noexcept {
  std::error_code error;
  fs::remove_all(temp, error);
}

}  // namespace kiln::distributed::checkpoint::detail
