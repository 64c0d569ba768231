// The character-level tokenizer and load_tokenizer (Note [Tokenizer files]);
// the byte-level BPE tokenizer is in data/byte_bpe.cpp.
#include "data/tokenizer.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "data/text_file.h"
#include "data/utf8.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace kiln::data {

// ---- CharTokenizer ---------------------------------------------------------------------

CharTokenizer::CharTokenizer(std::vector<char32_t> code_points) : code_points_(std::move(code_points)) {
  KILN_CHECK(!code_points_.empty(), "CharTokenizer: the vocabulary is empty");
  for (size_t k = 0; k < code_points_.size(); ++k) {
    KILN_CHECK(utf8::is_scalar_value(code_points_[k]), "CharTokenizer: code point ", k, " (",
               utf8::describe(code_points_[k]), ") is not a Unicode scalar value");
    KILN_CHECK(k == 0 || code_points_[k - 1] < code_points_[k], "CharTokenizer: the code points must increase, but ",
               k - 1, " is ", utf8::describe(code_points_[k - 1]), " and ", k, " is ",
               utf8::describe(code_points_[k]));
  }
  ascii_ids_.assign(128, -1);
  for (size_t k = 0; k < code_points_.size() && code_points_[k] < 128; ++k)
    ascii_ids_[code_points_[k]] = static_cast<int32_t>(k);
}

CharTokenizer CharTokenizer::from_corpus(std::string_view corpus) {
  KILN_CHECK(!corpus.empty(), "CharTokenizer::from_corpus: the corpus is empty");
  std::vector<bool> seen_ascii(128, false);
  std::vector<char32_t> others;
  size_t i = 0;
  while (i < corpus.size()) {
    const auto b = static_cast<unsigned char>(corpus[i]);
    if (b < 0x80) {
      seen_ascii[b] = true;
      ++i;
      continue;
    }
    const utf8::Step step = utf8::decode(corpus, i);
    KILN_CHECK(step.valid, "CharTokenizer::from_corpus: the corpus is not UTF-8: byte ", i, " (0x", std::hex,
               static_cast<unsigned>(b), std::dec, ") does not start a well-formed sequence");
    others.push_back(step.code_point);
    i += static_cast<size_t>(step.length);
  }
  std::vector<char32_t> code_points;
  for (char32_t c = 0; c < 128; ++c)
    if (seen_ascii[c]) code_points.push_back(c);
  std::sort(others.begin(), others.end());
  others.erase(std::unique(others.begin(), others.end()), others.end());
  code_points.insert(code_points.end(), others.begin(), others.end());
  return CharTokenizer(std::move(code_points));
}

int64_t CharTokenizer::id_of(char32_t c) const {
  if (c < 128) return ascii_ids_[c];
  auto it = std::lower_bound(code_points_.begin(), code_points_.end(), c);
  if (it == code_points_.end() || *it != c) return -1;
  return it - code_points_.begin();
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const utf8::Step step = utf8::decode(text, i);
    KILN_CHECK(step.valid, "CharTokenizer::encode: the text is not UTF-8: byte ", i, " (0x", std::hex,
               static_cast<unsigned>(step.code_point), std::dec, ") does not start a well-formed sequence");
    const int64_t id = id_of(step.code_point);
    KILN_CHECK(id >= 0, "CharTokenizer::encode: the character ", utf8::describe(step.code_point), " at byte ", i,
               " is not in the vocabulary of ", code_points_.size(), " characters");
    ids.push_back(id);
    i += static_cast<size_t>(step.length);
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    KILN_CHECK(ids[k] >= 0 && ids[k] < vocab_size(), "CharTokenizer::decode: id ", ids[k], " at position ", k,
               " is outside the vocabulary [0, ", vocab_size(), ")");
    utf8::append(text, code_points_[static_cast<size_t>(ids[k])]);
  }
  return text;
}

std::string CharTokenizer::to_text() const {
  std::string contents = "kiln-char-tokenizer v1 chars " + std::to_string(code_points_.size()) + "\n";
  char line[16];
  for (char32_t c : code_points_) {
    std::snprintf(line, sizeof line, "U+%04X\n", static_cast<unsigned>(c));
    contents += line;
  }
  return contents;
}

namespace {

CharTokenizer read_char_tokenizer(LineReader& lines);

}  // namespace

CharTokenizer CharTokenizer::load(const std::string& path) {
  LineReader lines(path, "CharTokenizer::load");
  return read_char_tokenizer(lines);
}

CharTokenizer CharTokenizer::from_text(std::string text, std::string source) {
  LineReader lines = LineReader::of_text(std::move(text), std::move(source), "CharTokenizer::from_text");
  return read_char_tokenizer(lines);
}

namespace {

CharTokenizer read_char_tokenizer(LineReader& lines) {
  const int64_t count = read_counted_header(lines, "kiln-char-tokenizer", "chars");
  if (count == 0) lines.fail("the header declares 0 characters; a vocabulary needs at least one");
  std::vector<char32_t> code_points;
  std::string_view line;
  while (lines.next(line)) {
    if (static_cast<int64_t>(code_points.size()) == count)
      lines.fail("the header declares " + std::to_string(count) + " characters but more lines follow");
    // "U+" then 4 to 6 uppercase hex digits.
    unsigned value = 0;
    const bool hex_digits = line.size() >= 6 && line.size() <= 8 && line.starts_with("U+") &&
                            std::all_of(line.begin() + 2, line.end(), [](char c) {
                              return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
                            });
    if (hex_digits) std::from_chars(line.data() + 2, line.data() + line.size(), value, 16);
    if (!hex_digits || !utf8::is_scalar_value(value))
      lines.fail("'" + std::string(line) + "' is not a code point written U+XXXX (4 to 6 hex digits, at most U+10FFFF, "
                 "no surrogates)");
    if (!code_points.empty() && value <= code_points.back())
      lines.fail(utf8::describe(value) + " does not come after " + utf8::describe(code_points.back()) +
                 " (the code points must increase)");
    code_points.push_back(value);
  }
  if (static_cast<int64_t>(code_points.size()) != count)
    lines.fail("the header declares " + std::to_string(count) + " characters but the file ends after " +
               std::to_string(code_points.size()) + " (a truncated file?)");
  return CharTokenizer(std::move(code_points));
}

}  // namespace

// ---- either kind ------------------------------------------------------------------------

void Tokenizer::save(const std::string& path) const { write_file_atomically(path, to_text(), "Tokenizer::save"); }

std::unique_ptr<Tokenizer> tokenizer_from_text(std::string text, std::string source) {
  const std::string_view first_line = std::string_view(text).substr(0, text.find('\n'));
  if (first_line.starts_with("kiln-byte-bpe "))
    return std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::from_text(std::move(text), std::move(source)));
  if (first_line.starts_with("kiln-char-tokenizer "))
    return std::make_unique<CharTokenizer>(CharTokenizer::from_text(std::move(text), std::move(source)));
  KILN_FAIL("load_tokenizer: ", source, " is not a Kiln tokenizer file: its first line is '", first_line.substr(0, 80),
            "'; expected 'kiln-byte-bpe v1 ...' or 'kiln-char-tokenizer v1 ...'");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  return tokenizer_from_text(read_file_bytes(path, "load_tokenizer"), quote_name(path));
}

}  // namespace kiln::data
