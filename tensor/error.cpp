#include "tensor/error.h"

#include <string_view>

namespace kiln {

namespace {

// Note [Source paths in messages]
// __FILE__ is the path the compiler was given, absolute under CMake: the
// build machine's folder would end every message a user sees. This file's
// own __FILE__ ends in "tensor/error.cpp", so what comes before is the
// source folder, found without any build setting; a location under it is
// shown relative to it ("tensor/linalg.cpp:88"), for Kiln's files and for a
// program's own files compiled from the same tree alike. Other paths stay
// as they are.
std::string_view source_root() {
  static const std::string_view root = [] {
    constexpr std::string_view self = __FILE__, tail = "tensor/error.cpp";
    return self.ends_with(tail) ? self.substr(0, self.size() - tail.size()) : std::string_view();
  }();
  return root;
}

const char* relative_to_source_root(const char* file) {
  const std::string_view root = source_root();
  if (file != nullptr && !root.empty() && std::string_view(file).starts_with(root)) return file + root.size();
  return file;
}

}  // namespace

static std::string with_location(const std::string& message, const char* file, int line) {
  return message + " [at " + file + ":" + std::to_string(line) + "]";
}

Error::Error(std::string message, const char* file, int line)
    : std::runtime_error(with_location(message, relative_to_source_root(file), line)),
      message_(std::move(message)),
      file_(relative_to_source_root(file)),
      line_(line) {}

namespace detail {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), file, line);
}

}  // namespace detail
}  // namespace kiln
