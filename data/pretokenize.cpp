// GPT-2's pre-split written as a hand-made scanner over its regex's
// alternatives, tried in the regex's order at every position.
#include "data/pretokenize.h"

#include <cstdint>

#include "data/utf8.h"

namespace kiln::data {
namespace {

enum class CharClass : uint8_t { Letter, Number, Space, Other };

// Note [Pre-split character classes] in data/pretokenize.h.
CharClass classify_non_ascii(char32_t c) {
  if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
      c == 0x202F || c == 0x205F || c == 0x3000)
    return CharClass::Space;
  if (c < 0x100) {
    if (c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE)) return CharClass::Number;
    if (c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7)) return CharClass::Letter;
    return CharClass::Other;  // C1 controls, Latin-1 punctuation and symbols
  }
  if (c < 0x250) return CharClass::Letter;                                  // Latin Extended-A and -B
  if (c >= 0x300 && c < 0x370) return CharClass::Other;                     // combining diacritical marks
  if (c >= 0x2000 && c < 0x2C00) return CharClass::Other;                   // punctuation, symbols, arrows, shapes
  if (c >= 0x3000 && c < 0x3040) return CharClass::Other;                   // CJK punctuation
  if ((c >= 0xD800 && c < 0xF900) || (c >= 0xFE00 && c < 0xFE10)) return CharClass::Other;  // private use, selectors
  if (c >= 0xFE30 && c < 0xFE70) return CharClass::Other;                   // CJK compatibility forms
  if (c >= 0xFF00 && c < 0xFF10) return CharClass::Other;                   // fullwidth punctuation
  if (c >= 0x1F000 && c < 0x1FC00) return CharClass::Other;                 // emoji and pictographs
  if (c >= 0xE0000) return CharClass::Other;                                // tags, private use planes
  return CharClass::Letter;
}

// The class of the character at text[i] and its length in bytes.
struct Char {
  CharClass cls;
  int length;
};

Char char_at(std::string_view text, size_t i) {
  const auto b = static_cast<uint8_t>(text[i]);
  if (b < 0x80) {
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) return {CharClass::Letter, 1};
    if (b >= '0' && b <= '9') return {CharClass::Number, 1};
    // \t \n \v \f \r and the space: Unicode's White_Space in ASCII (Python's
    // str.isspace also counts 1C..1F, but GPT-2's `regex` module does not).
    if ((b >= 0x09 && b <= 0x0D) || b == ' ') return {CharClass::Space, 1};
    return {CharClass::Other, 1};
  }
  const utf8::Step step = utf8::decode(text, i);
  if (!step.valid) return {CharClass::Other, 1};
  return {classify_non_ascii(step.code_point), step.length};
}

// The end of the run of characters of class `cls` that starts at `i`.
size_t run_end(std::string_view text, size_t i, CharClass cls) {
  while (i < text.size()) {
    const Char ch = char_at(text, i);
    if (ch.cls != cls) break;
    i += static_cast<size_t>(ch.length);
  }
  return i;
}

// The length of the contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
size_t contraction_length(std::string_view text, size_t i) {
  if (text[i] != '\'' || i + 1 >= text.size()) return 0;
  const char c = text[i + 1];
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (i + 2 < text.size()) {
    const char d = text[i + 2];
    if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return 3;
  }
  return 0;
}

// The end of the word that starts at `i` (i < text.size()).
size_t word_end(std::string_view text, size_t i) {
  if (const size_t n = contraction_length(text, i)) return i + n;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": a run, with one space before it.
  size_t start = i;
  if (text[i] == ' ' && i + 1 < text.size()) start = i + 1;
  const Char first = char_at(text, start);
  if (first.cls != CharClass::Space) return run_end(text, start, first.cls);
  // "\s+(?!\S)" then "\s+": a whitespace run keeps its last character for the
  // word after it, unless the run is one character or ends the text.
  size_t end = i;
  size_t last = i;  // the start of the run's last character
  while (end < text.size()) {
    const Char ch = char_at(text, end);
    if (ch.cls != CharClass::Space) break;
    last = end;
    end += static_cast<size_t>(ch.length);
  }
  if (end < text.size() && last > i) return last;
  return end;
}

}  // namespace

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = word_end(text, i);
    words.push_back(text.substr(i, end - i));
    i = end;
  }
  return words;
}

}  // namespace kiln::data
