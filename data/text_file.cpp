// File reads and line reading for the text formats of data/ (tokenizer
// files, corpora).
#include "data/text_file.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "tensor/atomic_file.h"
#include "tensor/error.h"

namespace kiln::data {

std::string read_file_bytes(const std::string& path, const char* op) {
  std::error_code error;
  KILN_CHECK(!std::filesystem::is_directory(path, error), op, ": '", path, "' is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.is_open(), op, ": cannot open '", path, "': ", errno_text(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  KILN_CHECK(!in.bad(), op, ": cannot read '", path, "': ", errno_text(errno));
  return std::move(buffer).str();
}


std::string quote_name(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out += text;
  out += '\'';
  return out;
}

LineReader::LineReader(std::string path, const char* op)
    : source_(quote_name(path)), op_(op), contents_(read_file_bytes(path, op)) {}

LineReader::LineReader(std::string contents, std::string source, const char* op, int)
    : source_(std::move(source)), op_(op), contents_(std::move(contents)) {}

LineReader LineReader::of_text(std::string contents, std::string source, const char* op) {
  return LineReader(std::move(contents), std::move(source), op, 0);
}

bool LineReader::next(std::string_view& line) {
  if (position_ >= contents_.size()) return false;
  ++line_number_;
  const size_t end = contents_.find('\n', position_);
  if (end == std::string::npos) fail("the line does not end with a newline (a truncated file?)");
  line = std::string_view(contents_).substr(position_, end - position_);
  position_ = end + 1;
  return true;
}

void LineReader::fail(const std::string& message) const {
  KILN_FAIL(op_, ": ", source_, " line ", line_number_, ": ", message);
}

// ---- numbers and headers ----------------------------------------------------------------

int64_t read_counted_header(LineReader& lines, std::string_view format, std::string_view count_word) {
  std::string_view line;
  if (!lines.next(line)) KILN_FAIL(lines.op(), ": ", lines.source(), " is empty; expected the header '", format,
                                   " v1 ", count_word, " <count>'");
  const std::string expected_prefix = std::string(format) + " v1 " + std::string(count_word) + " ";
  if (line.substr(0, format.size() + 1) == std::string(format) + " " && !line.starts_with(expected_prefix))
    lines.fail("unsupported header '" + std::string(line) + "'; this Kiln reads '" + expected_prefix + "<count>'");
  if (!line.starts_with(expected_prefix))
    lines.fail("the header is '" + std::string(line) + "'; expected '" + expected_prefix + "<count>'");
  const std::string_view digits = line.substr(expected_prefix.size());
  const std::optional<int64_t> count = parse_decimal(digits);
  if (!count || *count > (int64_t{1} << 31) - 257)
    lines.fail("the count '" + std::string(digits) + "' in the header is not a decimal number of entries");
  return *count;
}

std::optional<int64_t> parse_decimal(std::string_view text) {
  // from_chars alone accepts "-1" and stops at the first non-digit: demand
  // digits only, and not too many.
  if (text.empty() || text.size() > 18 || !std::all_of(text.begin(), text.end(), [](char c) {
        return c >= '0' && c <= '9';
      }))
    return std::nullopt;
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

}  // namespace kiln::data
