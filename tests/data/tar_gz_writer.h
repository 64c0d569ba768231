// Small .tar and .tar.gz archives for tests, written without the tar and
// gzip tools: ustar headers (Note [Tar archives] in data/tar.h) and a gzip
// stream (RFC 1952) of stored, i.e. uncompressed, deflate blocks (RFC 1951,
// section 3.2.4), which every inflater reads.
//
//   write_bytes(dir / "x.tar.gz", gzip_stored(tar_bytes({{"top/a.txt", {'h', 'i'}}})));
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::data::test_archives {

using Bytes = std::vector<uint8_t>;

struct TarMember {
  std::string name;  // at most 99 bytes
  Bytes contents;
  char type = '0';  // '0' a regular file, '5' a folder
};

// One ustar header block with a correct checksum.
inline Bytes tar_header(const TarMember& member) {
  Bytes header(512, 0);
  auto put = [&](size_t offset, const std::string& text) {
    std::memcpy(header.data() + offset, text.data(), text.size());
  };
  EXPECT_LT(member.name.size(), 100u) << member.name;
  put(0, member.name.substr(0, 99));
  put(100, "0000644");
  put(108, "0000000");
  put(116, "0000000");
  char number[16];
  std::snprintf(number, sizeof number, "%011llo", static_cast<unsigned long long>(member.contents.size()));
  put(124, number);
  put(136, "00000000000");
  header[156] = static_cast<uint8_t>(member.type);
  put(257, "ustar");
  put(263, "00");
  std::memset(header.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t b : header) sum += b;
  std::snprintf(number, sizeof number, "%06o", sum);
  std::memcpy(header.data() + 148, number, 7);  // six digits and a NUL; the eighth byte stays a space
  return header;
}

// The members in order, each padded to whole blocks, then the two zero
// blocks that end an archive.
inline Bytes tar_bytes(const std::vector<TarMember>& members) {
  Bytes out;
  for (const TarMember& member : members) {
    Bytes header = tar_header(member);
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), member.contents.begin(), member.contents.end());
    out.resize((out.size() + 511) / 512 * 512, 0);
  }
  out.resize(out.size() + 1024, 0);
  return out;
}

inline uint32_t crc32_of(const Bytes& bytes) {
  uint32_t crc = 0xffffffffu;
  for (uint8_t byte : bytes) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A gzip member holding `bytes` in stored deflate blocks of at most 65535 bytes.
inline Bytes gzip_stored(const Bytes& bytes) {
  Bytes out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};  // magic, deflate, no flags, no time, Unix
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, bytes.size() - pos);
    const bool last = pos + n == bytes.size();
    out.push_back(last ? 1 : 0);  // BFINAL, BTYPE 00 (stored)
    out.push_back(static_cast<uint8_t>(n));
    out.push_back(static_cast<uint8_t>(n >> 8));
    out.push_back(static_cast<uint8_t>(~n));
    out.push_back(static_cast<uint8_t>(~n >> 8));
    out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos),
               bytes.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < bytes.size());
  const uint32_t crc = crc32_of(bytes), size = static_cast<uint32_t>(bytes.size());
  for (uint32_t v : {crc, size})
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
  return out;
}

inline Bytes read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::filesystem::path& path, const Bytes& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

}  // namespace kiln::data::test_archives
