// Files written whole or not at all, and the POSIX file descriptor both the
// writers and the readers of Kiln's file formats use (safetensors.cpp,
// data/text_file.cpp).
//
// Note [Atomic file writes]
// A save goes to a temporary file beside the target (target + ".tmp." +
// pid: two processes saving the same file never share one), is flushed to
// disk, and is renamed over the target; the folder is then flushed so that
// the rename itself survives a crash. Readers see the old file or the new
// one, never a part, and a write that fails or is interrupted leaves the old
// file as it was: the temporary file is removed unless the rename happened.
// POSIX calls rather than iostreams, for fsync and rename, and for errno in
// the messages. Every error names the operation `op` and both files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// strerror's text for an errno value.
std::string errno_text(int error);

// A POSIX file descriptor, closed on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const { return fd_; }
  // Closes now and returns close()'s result, which on some filesystems is
  // the first sign that written data did not reach the disk.
  int close();

 private:
  int fd_;
};

// The temporary file of one atomic save (Note [Atomic file writes]).
//   AtomicFile file(path, "save_safetensors");
//   file.write(bytes.data(), bytes.size());
//   file.commit();  // without it, the destructor removes the temporary file
class AtomicFile {
 public:
  AtomicFile(std::string target, const char* op);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Where the temporary file of `target` is written.
  static std::string temp_path_for(const std::string& target);

  // Appends; throws kiln::Error naming the byte where the write failed.
  void write(const void* data, size_t nbytes);
  // Overwrites bytes already written, at `offset`.
  void write_at(uint64_t offset, const void* data, size_t nbytes);
  // Flushes the data, renames the file over the target, flushes the folder.
  void commit();

 private:
  std::string target_;
  std::string temp_path_;
  const char* op_;
  FileDescriptor fd_;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// One AtomicFile holding `contents`.
void write_file_atomically(const std::string& path, std::string_view contents, const char* op);

}  // namespace kiln
