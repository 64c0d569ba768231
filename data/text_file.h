// Whole-file reads and a line reader with line numbers: the file handling
// the tokenizer files and the text corpora share (their atomic writes are
// tensor/atomic_file.h's write_file_atomically).
// Every error names the operation `op` (e.g. "ByteBpeTokenizer::load") and the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <optional>
#include <string_view>

namespace kiln::data {

// The bytes of `path`. Throws kiln::Error naming op, the file and the reason.
std::string read_file_bytes(const std::string& path, const char* op);

// The lines of a text file, numbered from 1, without their "\n". A last line
// that does not end with "\n" is an error (a truncated file), reported when
// it is reached.
//   LineReader lines(path, "CharTokenizer::load");
//   std::string_view line;
//   while (lines.next(line)) { ... lines.fail("expected ...") ... }
class LineReader {
 public:
  // The lines of the file `path`; errors name it as '<path>'.
  LineReader(std::string path, const char* op);
  // The lines of `contents`, text that did not come from a file of its own
  // (a tokenizer inside a checkpoint); errors name it as `source`.
  static LineReader of_text(std::string contents, std::string source, const char* op);

  // Moves to the next line; false at the end of the file.
  bool next(std::string_view& line);
  // The number of the line next() returned last (0 before the first).
  int64_t line_number() const { return line_number_; }
  // Throws kiln::Error "<op>: <source> line <n>: <message>".
  [[noreturn]] void fail(const std::string& message) const;

  // '<path>' for a file, or the source given to of_text.
  const std::string& source() const { return source_; }
  const char* op() const { return op_; }

 private:
  LineReader(std::string contents, std::string source, const char* op, int);

  std::string source_;
  const char* op_;
  std::string contents_;
  size_t position_ = 0;
  int64_t line_number_ = 0;
};

// `text` between single quotes, as errors name a file: 'path'.
std::string quote_name(std::string_view text);

// A decimal number of 1 to 18 digits (no sign, no spaces), or nullopt.
std::optional<int64_t> parse_decimal(std::string_view text);

// Reads the first line of a format's file, "<format> v1 <count_word> <N>",
// and returns N (< 2^31 - 256). Errors name the file and line; another
// version of the format is named as unsupported.
int64_t read_counted_header(LineReader& lines, std::string_view format, std::string_view count_word);

}  // namespace kiln::data
