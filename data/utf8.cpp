// UTF-8 decoding per RFC 3629 (the table of well-formed byte sequences in
// section 4), one sequence at a time.
#include "data/utf8.h"

#include <cstdint>
#include <cstdio>

namespace kiln::data::utf8 {

Step decode(std::string_view text, size_t offset) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(offset);
  const Step invalid{b0, 1, false};
  if (b0 < 0x80) return {b0, 1, true};
  int length = 0;
  char32_t cp = 0;
  // The range of the second byte is narrower than 80..BF right after E0, ED,
  // F0 and F4: that is what rules out overlong forms, surrogates and code
  // points above U+10FFFF.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return invalid;  // 80..C1 and F5..FF never start a sequence
  }
  if (offset + static_cast<size_t>(length) > text.size()) return invalid;
  for (int k = 1; k < length; ++k) {
    const uint8_t b = byte(offset + static_cast<size_t>(k));
    if (b < lo || b > hi) return invalid;
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, length, true};
}

size_t first_invalid(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs dominate real text: skip them without a call.
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step step = decode(text, i);
    if (!step.valid) return i;
    i += static_cast<size_t>(step.length);
  }
  return std::string_view::npos;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string describe(char32_t c) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(c));
  std::string out = hex;
  // C0 and C1 controls, DEL and the surrogates print as the code alone.
  const bool printable = c >= 0x20 && c != 0x7F && !(c >= 0x80 && c < 0xA0) && is_scalar_value(c);
  if (printable) {
    out += " '";
    append(out, c);
    out += "'";
  }
  return out;
}

}  // namespace kiln::data::utf8
