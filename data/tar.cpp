// Tar and gzip reading (Note [Tar archives] in tar.h).
#include "data/tar.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include "tensor/error.h"

namespace kiln::data {

namespace {

constexpr size_t kBlock = 512;

// A header field that is NUL-terminated unless it fills its width.
std::string field_text(const uint8_t* header, size_t offset, size_t width) {
  const char* p = reinterpret_cast<const char*>(header + offset);
  return std::string(p, strnlen(p, width));
}

// An unsigned number field: octal ASCII padded with spaces or NULs, or GNU's
// base-256 (high bit of the first byte set) for values that octal cannot hold.
// Returns nullopt when the field holds anything else.
std::optional<uint64_t> field_number(const uint8_t* header, size_t offset, size_t width) {
  const uint8_t* p = header + offset;
  if (p[0] & 0x80) {
    // Base-256 is two's complement; a negative size or checksum is corrupt.
    if (p[0] & 0x40) return std::nullopt;
    uint64_t value = p[0] & 0x3f;
    for (size_t i = 1; i < width; ++i) {
      if (value > (std::numeric_limits<uint64_t>::max() >> 8)) return std::nullopt;
      value = (value << 8) | p[i];
    }
    return value;
  }
  size_t i = 0;
  while (i < width && p[i] == ' ') ++i;
  uint64_t value = 0;
  size_t digits = 0;
  for (; i < width && p[i] >= '0' && p[i] <= '7'; ++i, ++digits) {
    if (value > (std::numeric_limits<uint64_t>::max() >> 3)) return std::nullopt;
    value = value * 8 + static_cast<uint64_t>(p[i] - '0');
  }
  for (; i < width; ++i)
    if (p[i] != ' ' && p[i] != '\0') return std::nullopt;
  if (digits == 0) return std::nullopt;
  return value;
}

// Historic tars summed the header as signed chars; both sums are accepted,
// as GNU tar and Python's tarfile do.
bool checksum_matches(const uint8_t* header, uint64_t stored) {
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    uint8_t byte = (i >= 148 && i < 156) ? uint8_t(' ') : header[i];
    unsigned_sum += byte;
    signed_sum += static_cast<int8_t>(byte);
  }
  return stored == unsigned_sum || static_cast<int64_t>(stored) == signed_sum;
}

bool all_zero(const uint8_t* block) {
  return std::all_of(block, block + kBlock, [](uint8_t b) { return b == 0; });
}

// The "path" and "size" records of a pax extended header; each record is
// "<length> <key>=<value>\n" where length counts the whole record.
struct PaxOverrides {
  std::optional<std::string> path;
  std::optional<uint64_t> size;
};

PaxOverrides parse_pax(std::span<const uint8_t> body, const std::string& archive, const std::string& member) {
  PaxOverrides result;
  std::string_view text(reinterpret_cast<const char*>(body.data()), body.size());
  size_t pos = 0;
  while (pos < text.size() && text[pos] != '\0') {
    size_t space = text.find(' ', pos);
    KILN_CHECK(space != std::string_view::npos, "read_tar: '", archive, "': pax header '", member,
               "' has a record without a length at byte ", pos);
    uint64_t length = 0;
    for (size_t i = pos; i < space; ++i) {
      KILN_CHECK(text[i] >= '0' && text[i] <= '9' && length < (uint64_t(1) << 40), "read_tar: '", archive,
                 "': pax header '", member, "' has a bad record length at byte ", pos);
      length = length * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    KILN_CHECK(length > space - pos + 1 && length <= text.size() - pos && text[pos + length - 1] == '\n', "read_tar: '",
               archive, "': pax header '", member, "' has a record of length ", length, " at byte ", pos,
               " that does not end in a newline within the header");
    std::string_view record = text.substr(space + 1, pos + length - 1 - (space + 1));
    size_t equals = record.find('=');
    KILN_CHECK(equals != std::string_view::npos, "read_tar: '", archive, "': pax header '", member,
               "' has a record without '=' at byte ", pos);
    std::string_view key = record.substr(0, equals), value = record.substr(equals + 1);
    if (key == "path") {
      result.path = std::string(value);
    } else if (key == "size") {
      uint64_t size = 0;
      KILN_CHECK(!value.empty() && value.size() <= 19, "read_tar: '", archive, "': pax header '", member,
                 "' has a bad size '", value, "'");
      for (char c : value) {
        KILN_CHECK(c >= '0' && c <= '9', "read_tar: '", archive, "': pax header '", member, "' has a bad size '", value,
                   "'");
        size = size * 10 + static_cast<uint64_t>(c - '0');
      }
      result.size = size;
    }
    pos += length;
  }
  return result;
}

std::string errno_text(int error) { return std::generic_category().message(error); }

}  // namespace

bool is_gzip(std::span<const uint8_t> bytes) { return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b; }

std::vector<uint8_t> gunzip(std::span<const uint8_t> compressed, const std::string& name) {
  z_stream stream{};
  // 15 + 16: a 32 KiB window and a gzip (not zlib) wrapper.
  KILN_CHECK(inflateInit2(&stream, 15 + 16) == Z_OK, "gunzip: '", name,
             "': zlib cannot start: ", stream.msg ? stream.msg : "out of memory");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);

  // A gzip member ends with its uncompressed size mod 2^32, which sizes the
  // buffer in one go for the usual single-member archive under 4 GiB. The
  // hint is not trusted beyond deflate's largest ratio (1032:1); the buffer
  // grows when the hint is short.
  size_t hint = 0;
  if (compressed.size() >= 18) {
    const uint8_t* tail = compressed.data() + compressed.size() - 4;
    hint = size_t(tail[0]) | size_t(tail[1]) << 8 | size_t(tail[2]) << 16 | size_t(tail[3]) << 24;
  }
  hint = std::min(hint, compressed.size() * 1032);
  // One byte more than the hint leaves inflate room to read the trailer
  // without first growing a buffer that is exactly full.
  std::vector<uint8_t> out(std::max<size_t>(hint + 1, 1 << 16));
  size_t produced = 0;
  size_t consumed = 0;
  while (true) {
    // avail_in/avail_out are 32-bit: feed and drain at most 1 GiB at a time.
    constexpr size_t kChunk = size_t(1) << 30;
    if (produced == out.size()) out.resize(out.size() + out.size() / 2);
    size_t in_now = std::min(compressed.size() - consumed, kChunk);
    size_t out_now = std::min(out.size() - produced, kChunk);
    stream.next_in = const_cast<Bytef*>(compressed.data() + consumed);
    stream.avail_in = static_cast<uInt>(in_now);
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(out_now);
    int status = inflate(&stream, Z_NO_FLUSH);
    consumed += in_now - stream.avail_in;
    produced += out_now - stream.avail_out;
    if (status == Z_STREAM_END) {
      // gzip allows several members back to back; anything else after the
      // end is not part of the archive.
      if (consumed == compressed.size()) break;
      KILN_CHECK(is_gzip(compressed.subspan(consumed)), "gunzip: '", name, "': ", compressed.size() - consumed,
                 " bytes of trailing garbage after the gzip stream at byte ", consumed);
      KILN_CHECK(inflateReset(&stream) == Z_OK, "gunzip: '", name, "': zlib cannot restart at byte ", consumed);
      continue;
    }
    KILN_CHECK(status == Z_OK || status == Z_BUF_ERROR, "gunzip: '", name, "': corrupt gzip data near byte ", consumed,
               ": ", stream.msg ? stream.msg : "unknown zlib error");
    // Z_BUF_ERROR with all input used and room to spare: the stream stopped
    // before its end.
    KILN_CHECK(!(consumed == compressed.size() && produced < out.size()), "gunzip: '", name,
               "': the gzip stream ends early after ", compressed.size(), " bytes (truncated file)");
  }
  out.resize(produced);
  return out;
}

TarArchive::TarArchive(std::string name, std::vector<uint8_t> bytes)
    : name_(std::move(name)), bytes_(std::move(bytes)) {
  const uint8_t* data = bytes_.data();
  const uint64_t total = bytes_.size();
  // Overrides for the member after a GNU 'L' or pax 'x' member.
  std::optional<std::string> next_name;
  // A plain flag and value rather than std::optional, which gcc 12 wrongly
  // warns may be read uninitialized.
  bool has_next_size = false;
  uint64_t next_size = 0;
  uint64_t offset = 0;
  while (true) {
    KILN_CHECK(offset + kBlock <= total, "read_tar: '", name_, "': ends at byte ", total,
               " without the end-of-archive block (truncated archive)");
    const uint8_t* header = data + offset;
    if (all_zero(header)) break;

    std::string member = field_text(header, 0, 100);
    std::optional<uint64_t> stored_checksum = field_number(header, 148, 8);
    KILN_CHECK(stored_checksum && checksum_matches(header, *stored_checksum), "read_tar: '", name_,
               "': the header at byte ", offset, " (member '", member,
               "') has a bad checksum: not a tar archive, or a corrupt one");
    bool posix = std::memcmp(header + 257, "ustar\0", 6) == 0;
    std::string prefix = posix ? field_text(header, 345, 155) : std::string();
    if (!prefix.empty()) member = prefix + "/" + member;
    if (next_name) member = *next_name;

    std::optional<uint64_t> header_size = field_number(header, 124, 12);
    KILN_CHECK(header_size, "read_tar: '", name_, "': member '", member, "' at byte ", offset,
               " has an unreadable size field");
    uint64_t size = has_next_size ? next_size : *header_size;
    char type = static_cast<char>(header[156]);
    // Links and device files carry no contents whatever their size field says.
    if (type == '1' || type == '2' || type == '3' || type == '4' || type == '5' || type == '6') size = 0;

    uint64_t start = offset + kBlock;
    KILN_CHECK(size <= total - start, "read_tar: '", name_, "': member '", member, "' needs ", size,
               " bytes at offset ", start, " but only ", total - start, " remain (truncated archive)");
    std::span<const uint8_t> body(data + start, size);
    uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;

    bool override_for_next = false;
    if (type == 'L') {
      next_name = std::string(reinterpret_cast<const char*>(body.data()),
                              strnlen(reinterpret_cast<const char*>(body.data()), body.size()));
      override_for_next = true;
    } else if (type == 'K') {
      // A GNU long link name belongs to a link member, which is skipped; it
      // must not cancel a long name for the same member.
      override_for_next = true;
    } else if (type == 'x') {
      PaxOverrides pax = parse_pax(body, name_, member);
      if (pax.path) next_name = pax.path;
      if (pax.size) {
        has_next_size = true;
        next_size = *pax.size;
      }
      override_for_next = true;
    } else if (type == '0' || type == '\0' || type == '7') {
      entries_.push_back({member, start, size});
    }
    if (!override_for_next) {
      next_name.reset();
      has_next_size = false;
    }
    // The padding of the last member may be cut short only when nothing follows;
    // the end-of-archive check above then reports the truncation.
    offset = start + std::min(padded, total - start);
  }
}

TarArchive TarArchive::parse(std::span<const uint8_t> bytes, const std::string& name) {
  if (is_gzip(bytes)) return TarArchive(name, gunzip(bytes, name));
  return TarArchive(name, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

TarArchive TarArchive::open(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  KILN_CHECK(file, "read_tar: cannot open '", path, "': ", errno_text(errno));
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = size_t(1) << 20;
  while (true) {
    size_t old_size = bytes.size();
    bytes.resize(old_size + kChunk);
    size_t n = std::fread(bytes.data() + old_size, 1, kChunk, file.get());
    bytes.resize(old_size + n);
    if (n < kChunk) break;
  }
  KILN_CHECK(!std::ferror(file.get()), "read_tar: cannot read '", path, "' after byte ", bytes.size(), ": ",
             errno_text(errno));
  if (is_gzip(bytes)) {
    std::vector<uint8_t> inflated = gunzip(bytes, path);
    bytes = std::vector<uint8_t>();
    return TarArchive(path, std::move(inflated));
  }
  return TarArchive(path, std::move(bytes));
}

const TarEntry* TarArchive::find(const std::string& path) const {
  for (const TarEntry& entry : entries_)
    if (entry.name == path) return &entry;
  return nullptr;
}

std::span<const uint8_t> TarArchive::contents(const TarEntry& entry) const {
  KILN_CHECK(entry.offset <= bytes_.size() && entry.size <= bytes_.size() - entry.offset, "TarArchive::contents: '",
             name_, "': entry '", entry.name, "' (", entry.size, " bytes at offset ", entry.offset,
             ") is not part of this archive");
  return std::span<const uint8_t>(bytes_.data() + entry.offset, entry.size);
}

}  // namespace kiln::data
