// Atomic file writes (Note [Atomic file writes] in atomic_file.h).
#include "tensor/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "tensor/error.h"

namespace kiln {

std::string errno_text(int error) { return std::generic_category().message(error); }

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int FileDescriptor::close() {
  const int result = ::close(fd_);
  fd_ = -1;
  return result;
}

std::string AtomicFile::temp_path_for(const std::string& target) {
  return target + ".tmp." + std::to_string(::getpid());
}

AtomicFile::AtomicFile(std::string target, const char* op)
    : target_(std::move(target)),
      temp_path_(temp_path_for(target_)),
      op_(op),
      fd_(::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) {
  KILN_CHECK(fd_.get() >= 0, op_, ": cannot create the temporary file '", temp_path_, "' for '", target_, "': ",
             errno_text(errno));
}

AtomicFile::~AtomicFile() {
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::write(fd_.get(), p, nbytes);
    if (n < 0 && errno == EINTR) continue;
    // write() returning 0 for a non-empty request means no space was made.
    const int error = n < 0 ? errno : ENOSPC;
    KILN_CHECK(n > 0, op_, ": cannot write '", temp_path_, "' (temporary file for '", target_, "') at byte ",
               written_, ": ", errno_text(error));
    p += n;
    nbytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::pwrite(fd_.get(), p, nbytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    const int error = n < 0 ? errno : ENOSPC;
    KILN_CHECK(n > 0, op_, ": cannot write '", temp_path_, "' (temporary file for '", target_, "') at byte ", offset,
               ": ", errno_text(error));
    p += n;
    nbytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  KILN_CHECK(::fsync(fd_.get()) == 0, op_, ": cannot flush '", temp_path_, "' to disk: ", errno_text(errno));
  KILN_CHECK(fd_.close() == 0, op_, ": cannot close '", temp_path_, "': ", errno_text(errno));
  KILN_CHECK(::rename(temp_path_.c_str(), target_.c_str()) == 0, op_, ": cannot rename '", temp_path_, "' to '",
             target_, "': ", errno_text(errno));
  committed_ = true;
  std::string folder = std::filesystem::path(target_).parent_path().string();
  if (folder.empty()) folder = ".";
  FileDescriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  KILN_CHECK(dir.get() >= 0, op_, ": '", target_, "' was written but its folder '", folder,
             "' cannot be opened to flush the rename: ", errno_text(errno));
  // EINVAL: the filesystem cannot sync folders; there is nothing more to do.
  KILN_CHECK(::fsync(dir.get()) == 0 || errno == EINVAL, op_, ": '", target_, "' was written but flushing its folder '",
             folder, "' failed: ", errno_text(errno));
}

void write_file_atomically(const std::string& path, std::string_view contents, const char* op) {
  AtomicFile file(path, op);
  file.write(contents.data(), contents.size());
  file.commit();
}

}  // namespace kiln
