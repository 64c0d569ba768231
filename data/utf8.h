// UTF-8 decoding and encoding, shared by the tokenizers and the text corpus
// loader.
//
// "Well-formed" is RFC 3629's definition: no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. Decoding never throws: a byte
// that does not start a well-formed sequence comes back as an invalid step of
// length 1, so byte-level code (the BPE pre-split) can walk any byte string.
//
//   size_t bad = kiln::data::utf8::first_invalid(text);
//   if (bad != std::string_view::npos) ... // text is not UTF-8 from byte `bad` on
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::data::utf8 {

// One decoding step at some offset of a byte string.
struct Step {
  char32_t code_point;  // the decoded code point; for an invalid step, the byte itself
  int length;           // bytes consumed: 1..4 when valid, 1 when invalid
  bool valid;
};

// Decodes the sequence that starts at text[offset]; requires offset < text.size().
Step decode(std::string_view text, size_t offset);

// The offset of the first byte that is not part of a well-formed sequence, or
// std::string_view::npos when the whole text is well-formed UTF-8.
size_t first_invalid(std::string_view text);

// Appends the UTF-8 encoding of `code_point`; requires a Unicode scalar value
// (is_scalar_value).
void append(std::string& out, char32_t code_point);

// True for U+0000..U+10FFFF outside the surrogates: what UTF-8 can encode.
constexpr bool is_scalar_value(char32_t c) { return c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF); }

// "U+00E9 'é'" for printable characters, "U+000A" for control characters:
// how error messages name a character.
std::string describe(char32_t code_point);

}  // namespace kiln::data::utf8
