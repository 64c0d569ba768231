// A reader of .tar and .tar.gz archives, enough to take datasets straight
// from the archives they are published as (cifar-10-binary.tar.gz).
//
// Note [Tar archives]
// A tar archive is a sequence of 512-byte blocks: each member is a header
// block followed by its contents padded to a whole block, and the archive
// ends with a block of zeros. The header fields used here (ustar, POSIX.1-1988):
//   offset   0  name[100]    the path, NUL-terminated unless it fills the field
//   offset 124  size[12]     the content length, octal ASCII (GNU: base-256 when
//                            the first byte has its high bit set)
//   offset 148  chksum[8]    octal sum of the 512 header bytes, counting this
//                            field as eight spaces
//   offset 156  typeflag     '0' or '\0' a regular file, '5' a folder, ...
//   offset 257  magic[6]     "ustar\0" (POSIX) or "ustar " (old GNU)
//   offset 345  prefix[155]  POSIX only: a folder prefixed to name with '/'
// Two extensions carry names longer than the fields: a GNU 'L' member whose
// contents are the next member's name, and a POSIX 'x' (pax) member whose
// "path=" and "size=" records override the next member's header.
// Gzip is recognised by its magic bytes (1f 8b), not by the file name, and
// inflated with zlib before the blocks are parsed.
//
// Nothing read is trusted: every header checksum is verified, every size is
// checked against the bytes that are there, and errors name the archive and
// the member, e.g.
//   "read_tar: 'x.tar.gz': member 'cifar-10-batches-bin/data_batch_1.bin'
//    needs 30730000 bytes at offset 512 but only 1000 remain (truncated archive)".
//
// Usage:
//   kiln::data::TarArchive tar = kiln::data::TarArchive::open("cifar-10-binary.tar.gz");
//   if (const auto* e = tar.find("cifar-10-batches-bin/test_batch.bin")) use(tar.contents(*e));
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::data {

// One regular file of an archive: its full path and where its contents lie
// in the archive's uncompressed bytes.
struct TarEntry {
  std::string name;
  uint64_t offset = 0;  // of the first content byte
  uint64_t size = 0;
};

// The regular files of a tar archive, held in memory (uncompressed).
class TarArchive {
 public:
  // Reads a .tar or .tar.gz file. Throws kiln::Error naming the file when it
  // cannot be read, when the gzip stream is corrupt or truncated, or when a
  // header is corrupt or a member truncated (then naming the member too).
  static TarArchive open(const std::string& path);
  // Parses an archive already in memory, gzip-compressed or not; `name`
  // stands for the archive in error messages.
  static TarArchive parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& name() const { return name_; }
  // Regular files in archive order; folders, links and other members are
  // skipped.
  const std::vector<TarEntry>& entries() const { return entries_; }
  // The entry with exactly this path, or nullptr.
  const TarEntry* find(const std::string& path) const;
  // The contents of one of this archive's entries.
  std::span<const uint8_t> contents(const TarEntry& entry) const;

 private:
  TarArchive(std::string name, std::vector<uint8_t> bytes);

  std::string name_;
  std::vector<uint8_t> bytes_;  // the uncompressed archive
  std::vector<TarEntry> entries_;
};

// True when `bytes` start with the gzip magic number 1f 8b.
bool is_gzip(std::span<const uint8_t> bytes);

// Inflates a gzip stream (one or more concatenated members). Throws
// kiln::Error naming `name` when the stream is corrupt or ends early.
std::vector<uint8_t> gunzip(std::span<const uint8_t> compressed, const std::string& name);

}  // namespace kiln::data
