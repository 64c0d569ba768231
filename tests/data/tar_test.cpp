// The tar/gzip reader against archives built here byte by byte (so every
// header field is known) and against GNU tar's own output.
#include "data/tar.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "data_test_util.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

Bytes bytes_of(const std::string& text) { return Bytes(text.begin(), text.end()); }

void put(Bytes& header, size_t offset, const std::string& text) {
  std::memcpy(header.data() + offset, text.data(), text.size());
}

// One ustar header block with a correct checksum.
Bytes header_block(const std::string& name, uint64_t size, char type, const std::string& prefix = "") {
  Bytes header(512, 0);
  put(header, 0, name);
  put(header, 100, "0000644");
  put(header, 108, "0000000");
  put(header, 116, "0000000");
  char number[16];
  std::snprintf(number, sizeof number, "%011llo", static_cast<unsigned long long>(size));
  put(header, 124, number);
  put(header, 136, "00000000000");
  header[156] = static_cast<uint8_t>(type);
  std::memcpy(header.data() + 257,
              "ustar\0"
              "00",
              8);
  put(header, 345, prefix);
  std::memset(header.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t b : header) sum += b;
  std::snprintf(number, sizeof number, "%06o", sum);
  std::memcpy(header.data() + 148, number, 7);  // six digits and a NUL, then the space stays
  return header;
}

void append_member(Bytes& archive, const std::string& name, const Bytes& contents, char type = '0',
                   const std::string& prefix = "") {
  Bytes header = header_block(name, contents.size(), type, prefix);
  archive.insert(archive.end(), header.begin(), header.end());
  archive.insert(archive.end(), contents.begin(), contents.end());
  archive.resize((archive.size() + 511) / 512 * 512, 0);
}

void append_end(Bytes& archive) { archive.resize(archive.size() + 1024, 0); }

std::string text_of(std::span<const uint8_t> bytes) { return std::string(bytes.begin(), bytes.end()); }

class TarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_tar_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const Bytes& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return path;
  }
  Bytes read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }
  // Compresses with the gzip tool; false when it is not installed.
  bool gzip_file(const std::string& path) { return std::system(("gzip -nf '" + path + "' 2>/dev/null").c_str()) == 0; }

  fs::path dir_;
};

TEST_F(TarTest, ReadsRegularFilesInOrderAndSkipsFolders) {
  Bytes archive;
  append_member(archive, "top/", {}, '5');
  append_member(archive, "top/a.txt", bytes_of("hello"));
  append_member(archive, "top/empty", {});
  append_member(archive, "top/block.bin", Bytes(512, 7));  // exactly one block: no padding
  append_member(archive, "link", {}, '2');
  append_end(archive);

  TarArchive tar = TarArchive::parse(archive, "mem.tar");
  ASSERT_EQ(tar.entries().size(), 3u);
  EXPECT_EQ(tar.entries()[0].name, "top/a.txt");
  EXPECT_EQ(tar.entries()[1].name, "top/empty");
  EXPECT_EQ(tar.entries()[2].name, "top/block.bin");
  EXPECT_EQ(text_of(tar.contents(tar.entries()[0])), "hello");
  EXPECT_EQ(tar.contents(tar.entries()[1]).size(), 0u);
  EXPECT_EQ(tar.contents(tar.entries()[2]).size(), 512u);
  EXPECT_EQ(tar.contents(tar.entries()[2])[511], 7);
  EXPECT_EQ(tar.entries()[0].offset, 1024u);  // after the folder's header and its own
  ASSERT_NE(tar.find("top/a.txt"), nullptr);
  EXPECT_EQ(tar.find("a.txt"), nullptr);
}

TEST_F(TarTest, JoinsThePrefixFieldAndLongNameExtensions) {
  Bytes archive;
  append_member(archive, "file.bin", bytes_of("p"), '0', "deep/folder");
  std::string long_name = std::string(150, 'n') + "/gnu.bin";
  Bytes long_name_bytes = bytes_of(long_name);
  long_name_bytes.push_back(0);
  append_member(archive, "././@LongLink", long_name_bytes, 'L');
  append_member(archive, "truncated-name", bytes_of("g"));
  append_member(archive, "PaxHeaders/x", bytes_of("26 path=pax/name/here.bin\n10 size=3\n"), 'x');
  // The pax size (3) overrides the header's size field (0).
  append_member(archive, "short", {});
  Bytes three = bytes_of("abc");
  archive.insert(archive.end(), three.begin(), three.end());
  archive.resize((archive.size() + 511) / 512 * 512, 0);
  append_member(archive, "after", bytes_of("z"));
  append_end(archive);

  TarArchive tar = TarArchive::parse(archive, "mem.tar");
  ASSERT_EQ(tar.entries().size(), 4u);
  EXPECT_EQ(tar.entries()[0].name, "deep/folder/file.bin");
  EXPECT_EQ(tar.entries()[1].name, long_name);
  EXPECT_EQ(text_of(tar.contents(tar.entries()[1])), "g");
  EXPECT_EQ(tar.entries()[2].name, "pax/name/here.bin");
  EXPECT_EQ(text_of(tar.contents(tar.entries()[2])), "abc");
  // Overrides apply to one member only.
  EXPECT_EQ(tar.entries()[3].name, "after");
  EXPECT_EQ(text_of(tar.contents(tar.entries()[3])), "z");
}

TEST_F(TarTest, ReadsGzipAndPlainFilesAlike) {
  Bytes archive;
  append_member(archive, "x/y.bin", Bytes(3000, 42));
  append_end(archive);
  std::string plain = write("plain.tar", archive);
  EXPECT_EQ(TarArchive::open(plain).entries().size(), 1u);

  std::string path = write("a.tar", archive);
  if (!gzip_file(path)) GTEST_SKIP() << "the gzip tool is not installed";
  TarArchive tar = TarArchive::open(path + ".gz");
  ASSERT_EQ(tar.entries().size(), 1u);
  auto contents = tar.contents(tar.entries()[0]);
  ASSERT_EQ(contents.size(), 3000u);
  EXPECT_EQ(contents[0], 42);
  EXPECT_EQ(contents[2999], 42);
  EXPECT_EQ(tar.name(), path + ".gz");
}

TEST_F(TarTest, ReadsWhatGnuTarWrites) {
  fs::create_directories(dir_ / "src" / "sub");
  write("src/sub/one.txt", bytes_of("first"));
  write("src/two.txt", bytes_of(std::string(1000, 'b')));
  std::string out = (dir_ / "gnu.tar.gz").string();
  std::string command = "tar -C '" + dir_.string() + "' -czf '" + out + "' src 2>/dev/null";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "tar with gzip is not available";
  TarArchive tar = TarArchive::open(out);
  ASSERT_NE(tar.find("src/sub/one.txt"), nullptr);
  ASSERT_NE(tar.find("src/two.txt"), nullptr);
  EXPECT_EQ(text_of(tar.contents(*tar.find("src/sub/one.txt"))), "first");
  EXPECT_EQ(text_of(tar.contents(*tar.find("src/two.txt"))), std::string(1000, 'b'));
  EXPECT_EQ(tar.entries().size(), 2u);
}

TEST_F(TarTest, RejectsABadChecksum) {
  Bytes archive;
  append_member(archive, "a.bin", bytes_of("data"));
  append_end(archive);
  archive[10] ^= 1;  // inside the name field
  expect_error_parts([&] { TarArchive::parse(archive, "bad.tar"); },
                     {"read_tar: 'bad.tar': the header at byte 0", "bad checksum"});
  expect_error_parts([&] { TarArchive::parse(bytes_of(std::string(600, 'q')), "text.tar"); },
                     {"'text.tar'", "bad checksum: not a tar archive"});
}

TEST_F(TarTest, RejectsATruncatedMember) {
  Bytes archive;
  append_member(archive, "first.bin", bytes_of("ok"));
  append_member(archive, "big.bin", Bytes(5000, 1));
  archive.resize(1024 + 512 + 1000);
  expect_error_parts([&] { TarArchive::parse(archive, "cut.tar"); },
                     {"read_tar: 'cut.tar': member 'big.bin' needs 5000 bytes at offset 1536 but only 1000 remain",
                      "truncated archive"});
}

TEST_F(TarTest, RejectsAnArchiveWithoutItsEndBlock) {
  Bytes archive;
  append_member(archive, "a.bin", bytes_of("data"));
  expect_error_parts([&] { TarArchive::parse(archive, "open.tar"); },
                     {"'open.tar': ends at byte 1024 without the end-of-archive block"});
  expect_error_parts([&] { TarArchive::parse(Bytes{}, "empty.tar"); }, {"'empty.tar': ends at byte 0"});
}

TEST_F(TarTest, RejectsAnUnreadableSizeAndABadPaxRecord) {
  Bytes header = header_block("a.bin", 0, '0');
  std::memcpy(header.data() + 124, "12x45678901", 11);
  std::memset(header.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t b : header) sum += b;
  char number[8];
  std::snprintf(number, sizeof number, "%06o", sum);
  std::memcpy(header.data() + 148, number, 7);
  Bytes archive = header;
  append_end(archive);
  expect_error_parts([&] { TarArchive::parse(archive, "size.tar"); },
                     {"member 'a.bin' at byte 0 has an unreadable size field"});

  Bytes pax;
  append_member(pax, "PaxHeaders/p", bytes_of("99 path=x\n"), 'x');
  append_member(pax, "p", {});
  append_end(pax);
  expect_error_parts([&] { TarArchive::parse(pax, "pax.tar"); },
                     {"pax header 'PaxHeaders/p' has a record of length 99"});
}

TEST_F(TarTest, RejectsTruncatedAndCorruptGzip) {
  Bytes archive;
  for (int i = 0; i < 4; ++i) {
    Bytes noise(20000);
    for (size_t j = 0; j < noise.size(); ++j) noise[j] = static_cast<uint8_t>((j * 2654435761u + i) >> 13);
    append_member(archive, std::string("f") + std::to_string(i), noise);
  }
  append_end(archive);
  std::string path = write("z.tar", archive);
  if (!gzip_file(path)) GTEST_SKIP() << "the gzip tool is not installed";
  Bytes gz = read(path + ".gz");
  ASSERT_GT(gz.size(), 1000u);

  Bytes cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
  std::string cut_path = write("cut.tar.gz", cut);
  expect_error_parts([&] { TarArchive::open(cut_path); },
                     {"gunzip: '" + cut_path + "': the gzip stream ends early after " + std::to_string(cut.size()) +
                      " bytes (truncated file)"});

  Bytes corrupt = gz;
  for (size_t j = 100; j < 400; ++j) corrupt[j] ^= 0x5a;
  expect_error_parts([&] { TarArchive::parse(corrupt, "corrupt.tar.gz"); },
                     {"gunzip: 'corrupt.tar.gz': corrupt gzip data near byte"});

  Bytes trailing = gz;
  trailing.push_back('!');
  expect_error_parts(
      [&] { TarArchive::parse(trailing, "trail.tar.gz"); },
      {"'trail.tar.gz': 1 bytes of trailing garbage after the gzip stream at byte " + std::to_string(gz.size())});

  // Two gzip members back to back are one stream, as gzip itself reads them.
  Bytes doubled = gz;
  doubled.insert(doubled.end(), gz.begin(), gz.end());
  EXPECT_EQ(gunzip(doubled, "twice").size(), 2 * archive.size());
}

TEST_F(TarTest, NamesAMissingFile) {
  std::string path = (dir_ / "absent.tar.gz").string();
  expect_error_parts([&] { TarArchive::open(path); },
                     {"read_tar: cannot open '" + path + "'", "No such file or directory"});
}

}  // namespace
}  // namespace kiln::data
