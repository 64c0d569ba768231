#include "data/image.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "tensor/error.h"

// stb_image is compiled here, once, from Debian's libstb-dev header rather
// than linked from its libstb.so: the static functions stay private to this
// file, so a user linking libkiln next to their own copy of stb_image gets no
// clash. Only the three formats Kiln documents are compiled in.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
#define STBI_FAILURE_USERMSG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace kiln::data {
namespace {

uint32_t read_le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// stb's BMP reader pads a truncated file's missing pixels with zeros instead
// of failing (its JPEG and PNG readers do fail), so an uncompressed BMP's
// length is checked against its header here: pixel data starts at
// bfOffBits and holds |height| rows, each padded to a multiple of 4 bytes.
void check_bmp_complete(const uint8_t* bytes, size_t n, const std::string& name) {
  if (n < 26 || bytes[0] != 'B' || bytes[1] != 'M') return;  // not a BMP, or too short for stb to accept
  const uint64_t pixel_offset = read_le(bytes + 10, 4), header_size = read_le(bytes + 14, 4);
  int64_t width = 0, height = 0, bits = 0;
  if (header_size == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes, never compressed
    width = read_le(bytes + 18, 2);
    height = read_le(bytes + 20, 2);
    bits = read_le(bytes + 24, 2);
  } else if (header_size >= 40 && n >= 34) {
    const uint32_t compression = read_le(bytes + 30, 4);
    if (compression != 0 && compression != 3 && compression != 6) return;  // RLE: length unknown up front
    width = static_cast<int32_t>(read_le(bytes + 18, 4));
    height = static_cast<int32_t>(read_le(bytes + 22, 4));
    bits = read_le(bytes + 28, 2);
  } else {
    return;
  }
  if (width <= 0 || bits <= 0) return;  // stb rejects these itself
  const uint64_t row_bytes = (static_cast<uint64_t>(width) * static_cast<uint64_t>(bits) + 31) / 32 * 4;
  const uint64_t needed = pixel_offset + row_bytes * static_cast<uint64_t>(height < 0 ? -height : height);
  KILN_CHECK(needed <= n, "decode_image: cannot decode '", name, "' (", n, " bytes): truncated BMP, its ", width, "x",
             height < 0 ? -height : height, " pixels at ", bits, " bits need ", needed, " bytes");
}

// stb_image 2.27 (Debian 12's libstb-dev) adds up the 16 code counts of a
// JPEG DHT (define Huffman table) segment and fills its tables with that many
// symbols without checking the sum against the 256 a table holds, so a
// corrupt table writes past them (found by tests/fuzz/kiln_image_fuzz; stb
// 2.28 rejects it). The DHT segments are checked here first, walking the
// markers as stb does: bytes that are not a marker (entropy-coded data,
// padding) are stepped over one at a time, 0xFF fill bytes, stuffed zeros and
// the markers without a length (RSTn, SOI, EOI, TEM) are passed, and every
// other marker's segment is skipped by its length. Each table of a DHT is a
// class/id byte, 16 counts and then as many symbols as the counts add up to;
// stb reads tables while the segment length has bytes left, and so does this.
void check_jpeg_huffman_tables(const uint8_t* bytes, size_t n, const std::string& name) {
  if (n < 4 || bytes[0] != 0xFF || bytes[1] != 0xD8) return;  // not a JPEG
  auto byte_at = [&](size_t i) -> uint64_t { return i < n ? bytes[i] : 0; };  // stb reads zeros past the end
  size_t pos = 2;
  while (pos + 1 < n) {
    const uint8_t marker = bytes[pos + 1];
    if (bytes[pos] != 0xFF || marker == 0xFF) {
      ++pos;
      continue;
    }
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD9)) {
      pos += 2;
      continue;
    }
    const uint64_t length = byte_at(pos + 2) << 8 | byte_at(pos + 3);
    if (marker == 0xC4) {
      int64_t left = static_cast<int64_t>(length) - 2;
      uint64_t table = pos + 4;
      while (left > 0) {
        uint64_t symbols = 0;
        for (uint64_t i = 1; i <= 16; ++i) symbols += byte_at(table + i);
        KILN_CHECK(symbols <= 256, "decode_image: cannot decode '", name, "' (", n,
                   " bytes): corrupt JPEG, the Huffman table at offset ", table, " has ", symbols,
                   " codes but at most 256 fit");
        left -= static_cast<int64_t>(17 + symbols);
        table += 17 + symbols;
      }
    }
    pos += 2 + length;
  }
}

}  // namespace

Tensor decode_image(const uint8_t* bytes, size_t n, const std::string& name, DecodeOptions options) {
  KILN_CHECK(options.channels >= 1 && options.channels <= 4, "decode_image: channels must be 1, 2, 3 or 4, got ",
             options.channels, " (for '", name, "')");
  KILN_CHECK(n > 0, "decode_image: '", name, "' is empty (0 bytes)");
  KILN_CHECK(bytes != nullptr, "decode_image: '", name, "' has ", n, " bytes but a null data pointer");
  KILN_CHECK(n <= static_cast<size_t>(INT_MAX), "decode_image: '", name, "' has ", n,
             " bytes, more than stb_image reads (", INT_MAX, ")");
  check_bmp_complete(bytes, n, name);
  check_jpeg_huffman_tables(bytes, n, name);
  int width = 0, height = 0, file_channels = 0;
  // stb's failure reason is thread_local (STBI_THREAD_LOCAL), so decoders on
  // several threads each read their own.
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(bytes, static_cast<int>(n), &width, &height, &file_channels, options.channels),
      stbi_image_free);
  KILN_CHECK(pixels != nullptr, "decode_image: cannot decode '", name, "' (", n,
             " bytes, expected a PNG, JPEG or BMP image): ", stbi_failure_reason());
  KILN_CHECK(!options.require_channels || file_channels == options.channels, "decode_image: '", name, "' has ",
             file_channels, " channels but ", options.channels, " are required");

  const int64_t c = options.channels, h = height, w = width;
  Tensor out = Tensor::empty({c, h, w}, DType::UInt8);
  // pixels: (H, W, C) interleaved, as every image format stores them.
  // dst: (C, H, W)
  const stbi_uc* src = pixels.get();
  uint8_t* dst = out.data<uint8_t>();
  if (c == 1) {
    std::memcpy(dst, src, static_cast<size_t>(h * w));
    return out;
  }
  for (int64_t i = 0; i < h * w; ++i)
    for (int64_t k = 0; k < c; ++k) dst[k * h * w + i] = src[i * c + k];
  return out;
}

Tensor decode_image_file(const std::string& path, DecodeOptions options) {
  std::ifstream file(path, std::ios::binary);
  KILN_CHECK(file.is_open(), "decode_image_file: cannot open '", path, "': ", std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  KILN_CHECK(!file.bad(), "decode_image_file: error while reading '", path, "'");
  return decode_image(bytes.data(), bytes.size(), path, options);
}

}  // namespace kiln::data
