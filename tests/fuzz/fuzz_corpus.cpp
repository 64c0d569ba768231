// Writes the seed corpora of the fuzz targets: small valid inputs that get
// past each reader's magic numbers, headers and checksums, from which
// libFuzzer mutates its way into the corner cases.
//
//   kiln_fuzz_corpus OUT   ->  OUT/cifar10/  a few CIFAR-10 batches
//                              OUT/tar/      .tar and .tar.gz archives
//                              OUT/image/    PNG, BMP and JPEG images
//
// Every seed is written here from code (ustar headers by hand, gzip by zlib,
// images by stb_image_write) rather than kept as binary files in the tree, and
// nothing here uses libkiln: a seed made by the code under test would share
// its bugs. Seeds of kiln_image_fuzz start with the byte that target reads as
// its decode options (tests/fuzz/image_fuzz.cpp).
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#define STBI_WRITE_NO_STDIO
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

void write_file(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) throw std::runtime_error("cannot write " + path.string());
}

// CIFAR-10 records (Note [CIFAR-10 binary format] in data/cifar10.h): a label
// byte, then 3 * 32 * 32 pixel bytes in CHW order.
Bytes cifar10_records(int count) {
  Bytes out;
  for (int i = 0; i < count; ++i) {
    out.push_back(static_cast<uint8_t>((3 * i + 1) % 10));
    for (int p = 0; p < 3 * 32 * 32; ++p) out.push_back(static_cast<uint8_t>((p * 7 + i * 31) & 0xff));
  }
  return out;
}

// A tiny image: (H, W, C) interleaved pixels, as stb_image_write takes them.
Bytes pixels(int w, int h, int c) {
  Bytes out(static_cast<size_t>(w * h * c));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>((i * 37 + 11) & 0xff);
  return out;
}

void append_to(void* context, void* data, int size) {
  Bytes* out = static_cast<Bytes*>(context);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  out->insert(out->end(), p, p + size);
}

enum class Format { Png, Bmp, Jpeg };

Bytes encode(Format format, int w, int h, int c) {
  const Bytes px = pixels(w, h, c);
  Bytes out;
  int ok = 0;
  if (format == Format::Png) ok = stbi_write_png_to_func(append_to, &out, w, h, c, px.data(), w * c);
  if (format == Format::Bmp) ok = stbi_write_bmp_to_func(append_to, &out, w, h, c, px.data());
  if (format == Format::Jpeg) ok = stbi_write_jpg_to_func(append_to, &out, w, h, c, px.data(), 90);
  if (!ok) throw std::runtime_error("stb_image_write failed");
  return out;
}

// One ustar member (Note [Tar archives] in data/tar.h): a header block with a
// correct checksum, then the contents padded to whole 512-byte blocks.
void append_member(Bytes& tar, const std::string& name, const Bytes& contents, char type = '0') {
  Bytes header(512, 0);
  auto put = [&](size_t offset, const std::string& text) { std::memcpy(&header[offset], text.data(), text.size()); };
  put(0, name.substr(0, 100));
  put(100, "0000644");
  put(108, "0000000");
  put(116, "0000000");
  char number[16];
  std::snprintf(number, sizeof number, "%011llo", static_cast<unsigned long long>(contents.size()));
  put(124, number);
  put(136, "00000000000");
  header[156] = static_cast<uint8_t>(type);
  put(257, "ustar");
  put(263, "00");
  std::memset(&header[148], ' ', 8);
  unsigned sum = 0;
  for (uint8_t b : header) sum += b;
  std::snprintf(number, sizeof number, "%06o", sum);
  std::memcpy(&header[148], number, 7);  // six digits and a NUL; the eighth byte stays a space
  tar.insert(tar.end(), header.begin(), header.end());
  tar.insert(tar.end(), contents.begin(), contents.end());
  tar.resize((tar.size() + 511) / 512 * 512, 0);
}

void end_archive(Bytes& tar) { tar.resize(tar.size() + 1024, 0); }

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A pax record "LEN path=VALUE\n", LEN counting the whole record itself.
Bytes pax_record(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return text(std::to_string(len) + body);
}

Bytes gzip(const Bytes& raw) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)  // +16: a gzip wrapper
    throw std::runtime_error("deflateInit2 failed");
  Bytes out(deflateBound(&z, raw.size()) + 64);
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&z, Z_FINISH);
  deflateEnd(&z);
  if (status != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(z.total_out);
  return out;
}

Bytes with_options_byte(uint8_t options, const Bytes& file) {
  Bytes out{options};
  out.insert(out.end(), file.begin(), file.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_FOLDER\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  try {
    write_file(out / "cifar10" / "one_record.bin", cifar10_records(1));
    write_file(out / "cifar10" / "three_records.bin", cifar10_records(3));

    // kiln_image_fuzz reads the first byte as options: low two bits + 1 the
    // channel count, bit 2 require_channels.
    const Bytes png_rgb = encode(Format::Png, 5, 3, 3);
    write_file(out / "image" / "rgb.png", with_options_byte(2, png_rgb));
    write_file(out / "image" / "grey.png", with_options_byte(0, encode(Format::Png, 4, 4, 1)));
    write_file(out / "image" / "rgba_required.png", with_options_byte(4 | 3, encode(Format::Png, 3, 2, 4)));
    write_file(out / "image" / "rgb.bmp", with_options_byte(2, encode(Format::Bmp, 5, 3, 3)));
    write_file(out / "image" / "rgba.bmp", with_options_byte(3, encode(Format::Bmp, 2, 2, 4)));
    const Bytes jpeg = encode(Format::Jpeg, 9, 8, 3);
    write_file(out / "image" / "rgb.jpg", with_options_byte(2, jpeg));
    write_file(out / "image" / "grey.jpg", with_options_byte(0, encode(Format::Jpeg, 8, 8, 1)));

    // The layouts load_cifar10 and ImageFolder read, plain and gzipped.
    Bytes cifar_tar;
    append_member(cifar_tar, "cifar-10-batches-bin/", {}, '5');
    append_member(cifar_tar, "cifar-10-batches-bin/test_batch.bin", cifar10_records(2));
    end_archive(cifar_tar);
    write_file(out / "tar" / "cifar10.tar", cifar_tar);
    write_file(out / "tar" / "cifar10.tar.gz", gzip(cifar_tar));

    Bytes folder_tar;
    append_member(folder_tar, "./images/cat/0001.png", png_rgb);
    append_member(folder_tar, "./images/dog/0001.jpg", jpeg);
    end_archive(folder_tar);
    write_file(out / "tar" / "image_folder.tar.gz", gzip(folder_tar));

    // Names too long for the 100-byte field: a GNU 'L' member, then a pax
    // 'x' member overriding the next header's path.
    const std::string long_name = "images/" + std::string(120, 'n') + "/0001.png";
    Bytes long_names;
    Bytes gnu_name = text(long_name);
    gnu_name.push_back(0);
    append_member(long_names, "././@LongLink", gnu_name, 'L');
    append_member(long_names, long_name.substr(0, 99), png_rgb);
    append_member(long_names, "PaxHeaders/0002.png", pax_record("path", long_name + "2"), 'x');
    append_member(long_names, "short.png", png_rgb);
    end_archive(long_names);
    write_file(out / "tar" / "long_names.tar", long_names);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_fuzz_corpus: %s\n", e.what());
    return 1;
  }
  std::printf("kiln_fuzz_corpus: seeds written under %s/{cifar10,tar,image}\n", out.string().c_str());
  return 0;
}
